print("substatus-protogen: not built yet")
