@testable import RPCHTTP2Transport
import Testing

/// Every connection-management policy, driven with explicit times (no socket, no sleep).
@Suite struct ConnectionStateMachineTests {
  typealias Machine = ConnectionStateMachine
  typealias Action = ConnectionStateMachine.Action

  /// A machine with nothing on but what `configure` sets, opened at time zero.
  static func machine(_ configure: (inout Machine.Configuration) -> Void = { _ in }) -> Machine {
    var configuration = Machine.Configuration()
    configure(&configuration)
    return Machine(configuration: configuration, now: .zero)
  }

  /// A server machine whose peer completed the handshake at time zero.
  static func ready(_ configure: (inout Machine.Configuration) -> Void = { _ in }) -> Machine {
    var machine = machine(configure)
    machine.handshakeCompleted(now: .zero)
    return machine
  }

  // MARK: Handshake

  @Test(
    "the handshake deadline closes a connection that never completes it, and only that",
    arguments: [
      (completedAt: Duration?.none, checkAt: Duration.seconds(9), expected: Action.none),
      (nil, .seconds(10), .close(.handshakeTimeout)),
      (.seconds(9), .seconds(10), .none),
      (.seconds(9), .seconds(3600), .none),
    ])
  func handshakeDeadline(completedAt: Duration?, checkAt: Duration, expected: Action) {
    var machine = Self.machine { $0.handshakeTimeout = .seconds(10) }
    #expect(machine.nextDeadline == .seconds(10))
    if let completedAt { machine.handshakeCompleted(now: completedAt) }
    #expect(machine.timerFired(now: checkAt) == expected)
  }

  // MARK: Keepalive

  @Test func keepalivePingsAfterSilenceAndClosesWithoutAck() {
    var machine = Self.ready {
      $0.keepaliveTime = .seconds(60)
      $0.keepaliveTimeout = .seconds(20)
    }
    #expect(machine.nextDeadline == .seconds(60))
    machine.bytesRead(now: .seconds(30))
    #expect(machine.timerFired(now: .seconds(60)) == .none, "reading moved the keepalive deadline")
    #expect(machine.nextDeadline == .seconds(90))
    #expect(machine.timerFired(now: .seconds(90)) == .sendPing)
    #expect(machine.nextDeadline == .seconds(110))
    #expect(machine.timerFired(now: .seconds(109)) == .none)
    #expect(machine.timerFired(now: .seconds(110)) == .close(.keepaliveTimeout))
    #expect(machine.nextDeadline == nil)
    #expect(machine.timerFired(now: .seconds(200)) == .none, "a closed machine does nothing more")
  }

  @Test func acknowledgedKeepaliveKeepsTheConnection() {
    var machine = Self.ready {
      $0.keepaliveTime = .seconds(60)
      $0.keepaliveTimeout = .seconds(20)
    }
    #expect(machine.timerFired(now: .seconds(60)) == .sendPing)
    machine.bytesRead(now: .seconds(61))
    machine.pingAckReceived()
    #expect(machine.timerFired(now: .seconds(80)) == .none)
    #expect(machine.nextDeadline == .seconds(121))
  }

  // MARK: Ping policing (grpc-go's enforcement)

  struct PingCase: Sendable, CustomTestStringConvertible {
    var name: String
    var openStreams: Int
    var permitWithoutCalls = false
    /// Seconds of each ping; `true` when DATA or HEADERS went out before it.
    var pings: [(at: Int, sentData: Bool)]
    var expected: Action
    var testDescription: String { name }
  }

  @Test(arguments: [
    PingCase(
      name: "pings at the allowed interval with calls", openStreams: 1,
      pings: [(0, false), (300, false), (600, false), (900, false)], expected: .none),
    PingCase(
      name: "three pings too close with calls", openStreams: 1,
      pings: [(0, false), (1, false), (2, false), (3, false)], expected: .goawayTooManyPings),
    PingCase(
      name: "two strikes are tolerated", openStreams: 1, pings: [(0, false), (1, false), (2, false)], expected: .none),
    PingCase(
      name: "data sent in between forgives", openStreams: 1,
      pings: [(0, false), (1, true), (2, true), (3, true), (4, true)], expected: .none),
    PingCase(
      name: "without calls pings must be two hours apart", openStreams: 0,
      pings: [(0, false), (600, false), (1200, false), (1800, false)], expected: .goawayTooManyPings),
    PingCase(
      name: "without calls, when permitted, the interval is the minimum", openStreams: 0, permitWithoutCalls: true,
      pings: [(0, false), (600, false), (1200, false), (1800, false)], expected: .none),
  ])
  func pingPolicing(_ test: PingCase) {
    var machine = Self.ready {
      $0.policesPings = true
      $0.minPingInterval = .seconds(300)
      $0.permitPingWithoutCalls = test.permitWithoutCalls
      $0.maxPingStrikes = 2
    }
    for _ in 0..<test.openStreams { #expect(machine.streamOpened() == .accept) }
    var last = Action.none
    for ping in test.pings {
      last = machine.pingReceived(now: .seconds(ping.at), sentDataOrHeaders: ping.sentData)
      if last != .none { break }
    }
    #expect(last == test.expected)
  }

  @Test func clientsDoNotPolicePings() {
    var machine = Self.ready()
    for second in 0..<10 {
      #expect(machine.pingReceived(now: .milliseconds(second), sentDataOrHeaders: false) == .none)
    }
  }

  // MARK: Idle timeout

  @Test func idleConnectionGetsGoawayThenCloses() {
    var machine = Self.ready { $0.maxIdle = .seconds(300) }
    #expect(machine.nextDeadline == .seconds(300))
    #expect(machine.streamOpened() == .accept)
    #expect(machine.nextDeadline == nil, "a connection with a call is not idle")
    #expect(machine.timerFired(now: .seconds(400)) == .none)
    machine.streamClosed(now: .seconds(500))
    #expect(machine.nextDeadline == .seconds(800))
    #expect(machine.timerFired(now: .seconds(799)) == .none)
    #expect(machine.timerFired(now: .seconds(800)) == .goaway(.idle))
    #expect(machine.isDraining)
    #expect(machine.drainedAction() == .close(.drained), "no stream: close once GOAWAY is written")
  }

  @Test func idleTimeoutCountsFromTheLastCall() {
    var machine = Self.ready { $0.maxIdle = .seconds(10) }
    for second in stride(from: 0, to: 100, by: 5) {
      #expect(machine.streamOpened() == .accept)
      #expect(machine.timerFired(now: .seconds(second)) == .none)
      machine.streamClosed(now: .seconds(second + 1))
    }
    #expect(machine.timerFired(now: .seconds(105)) == .none)
    #expect(machine.timerFired(now: .seconds(106)) == .goaway(.idle))
  }

  // MARK: Maximum age and drain

  @Test func oldConnectionDrainsThenClosesAtTheEndOfTheGrace() {
    var machine = Self.ready {
      $0.maxAge = .seconds(60)
      $0.maxAgeGrace = .seconds(5)
    }
    #expect(machine.streamOpened() == .accept)
    #expect(machine.timerFired(now: .seconds(60)) == .goaway(.age))
    #expect(machine.drainedAction() == .none, "a call is still open")
    #expect(machine.nextDeadline == .seconds(65))
    #expect(machine.timerFired(now: .seconds(65)) == .close(.graceExpired))
  }

  @Test func drainingConnectionClosesWhenItsLastCallEnds() {
    var machine = Self.ready()
    #expect(machine.streamOpened() == .accept)
    #expect(machine.streamOpened() == .accept)
    #expect(machine.shutdownRequested(now: .seconds(1), grace: .seconds(30)) == .goaway(.shutdown))
    #expect(machine.nextDeadline == .seconds(31))
    machine.streamClosed(now: .seconds(2))
    #expect(machine.drainedAction() == .none)
    machine.streamClosed(now: .seconds(3))
    #expect(machine.drainedAction() == .close(.drained))
  }

  @Test func secondShutdownOnlyShortensTheGrace() {
    var machine = Self.ready()
    #expect(machine.streamOpened() == .accept)
    #expect(machine.shutdownRequested(now: .zero, grace: .seconds(30)) == .goaway(.shutdown))
    #expect(machine.shutdownRequested(now: .seconds(1), grace: .seconds(5)) == .none)
    #expect(machine.nextDeadline == .seconds(6))
    #expect(machine.shutdownRequested(now: .seconds(2), grace: .seconds(60)) == .none)
    #expect(machine.nextDeadline == .seconds(6))
  }

  @Test func clientClosesAfterGoawayOnceItsCallsAreDone() {
    var machine = Self.ready()
    #expect(machine.streamOpened() == .accept)
    #expect(machine.goawayReceived() == .none)
    #expect(machine.isDraining)
    machine.streamClosed(now: .seconds(1))
    #expect(machine.drainedAction() == .close(.drained))
  }

  // MARK: Write timeout

  @Test func stalledReaderIsClosedAfterTheWriteTimeout() {
    var machine = Self.ready { $0.writeTimeout = .seconds(30) }
    #expect(machine.streamOpened() == .accept)
    machine.writeStalled(now: .seconds(10))
    machine.writeStalled(now: .seconds(20))
    #expect(machine.nextDeadline == .seconds(40), "the stall counts from its first report")
    machine.bytesRead(now: .seconds(35))
    #expect(machine.timerFired(now: .seconds(39)) == .none, "reading (pings, requests) does not count as progress")
    #expect(machine.timerFired(now: .seconds(40)) == .close(.writeTimeout))
  }

  @Test func progressResetsTheWriteTimeout() {
    var machine = Self.ready { $0.writeTimeout = .seconds(30) }
    machine.writeStalled(now: .seconds(10))
    machine.writeProgressed()
    #expect(machine.nextDeadline == nil)
    machine.writeStalled(now: .seconds(35))
    #expect(machine.timerFired(now: .seconds(40)) == .none)
    #expect(machine.timerFired(now: .seconds(65)) == .close(.writeTimeout))
  }

  // MARK: Request buffer budget

  @Test func budgetBoundsTheBytesBufferedAcrossStreams() {
    // 256 streams each announcing a 4 MiB message and sending all but its last byte, in 16 KiB
    // DATA frames: the first stream fits, every other one is reset when it would pass the budget.
    var machine = Self.ready { $0.maxBufferedRequestBytes = 8 << 20 }
    let frames = Array(repeating: 16 << 10, count: 256) + [4]  // 5 + 4 MiB - 1 bytes
    var reset = 0
    for _ in 0..<256 {
      #expect(machine.streamOpened() == .accept)
      var streamBytes = 0
      for frame in frames {
        guard machine.reserveRequestBytes(frame) else {
          reset += 1
          machine.releaseRequestBytes(streamBytes)  // the stream's buffer is freed
          machine.streamClosed(now: .zero)
          break
        }
        streamBytes += frame
      }
      #expect(machine.bufferedRequestBytes <= 8 << 20)
    }
    #expect(machine.bufferedRequestBytes == (4 << 20) + 4)
    #expect(reset == 255)
    let rest = machine.reserveRequestBytes((4 << 20) - 4)
    #expect(rest, "the rest of the budget is there")
    let full = machine.streamOpened()
    #expect(full == .refuse, "a full buffer refuses new streams")
    let oneMore = machine.reserveRequestBytes(1)
    #expect(!oneMore)
    machine.releaseRequestBytes(4 << 20)
    let again = machine.streamOpened()
    #expect(again == .accept)
  }

  @Test func noBudgetBuffersAnything() {
    var machine = Self.ready()
    let reserved = machine.reserveRequestBytes(1 << 40)
    #expect(reserved)
    let admission = machine.streamOpened()
    #expect(admission == .accept)
  }

  // MARK: One deadline

  @Test(arguments: [
    (idle: 300, age: 60, keepalive: 7200, expected: 60),
    (idle: 300, age: 3600, keepalive: 120, expected: 120),
    (idle: 30, age: 3600, keepalive: 120, expected: 30),
  ])
  func nextDeadlineIsTheEarliestPolicy(idle: Int, age: Int, keepalive: Int, expected: Int) {
    let machine = Self.ready {
      $0.maxIdle = .seconds(idle)
      $0.maxAge = .seconds(age)
      $0.keepaliveTime = .seconds(keepalive)
    }
    #expect(machine.nextDeadline == .seconds(expected))
  }

  @Test func everyPolicyOffMeansNoTimer() {
    #expect(Self.ready().nextDeadline == nil)
  }
}
