/// One envelope as Connect streaming and gRPC-Web frame messages: flags, big-endian length, payload.
func envelope(_ flags: UInt8, _ payload: [UInt8]) -> [UInt8] {
  let n = payload.count
  return [flags, UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + payload
}
