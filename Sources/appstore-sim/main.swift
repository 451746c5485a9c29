print("appstore-sim: not built yet")
