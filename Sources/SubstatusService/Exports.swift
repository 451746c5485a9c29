// The service's lower modules, re-exported: a user of `SubstatusService` (the daemon, tests,
// benchmarks) sees the environment, log sink, Apple clients, webhook dispatcher and background jobs
// it configures the service with without importing each (docs/architecture.md "Modules").
@_exported import SubstatusAppleUpstream
@_exported import SubstatusBackgroundJobs
@_exported import SubstatusEventDelivery
@_exported import SubstatusServiceCore
