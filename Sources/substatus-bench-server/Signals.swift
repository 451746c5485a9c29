import Dispatch
import Glibc

/// Runs `action` on SIGTERM and SIGINT. In a file of its own: a closure written in `main.swift`
/// top-level code would be main-actor isolated and trap when Dispatch calls it on another thread.
func onTerminationSignals(_ action: @escaping @Sendable () -> Void) -> [any DispatchSourceSignal] {
  [SIGTERM, SIGINT].map { number in
    signal(number, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
    source.setEventHandler(handler: action)
    source.resume()
    return source
  }
}
