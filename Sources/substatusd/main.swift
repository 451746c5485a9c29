print("substatusd: the service is not built yet (see the service issue)")
