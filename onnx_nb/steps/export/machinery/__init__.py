"""The export machinery every kind of model shares: the attempts loop that stages, checks and publishes a file
(:mod:`.attempts`, :mod:`.staged`, :mod:`.writing`), PyTorch's route (:mod:`.torch_route`) and its exporters
(:mod:`.exporters`), the module flattened for a trace (:mod:`.wrap`), the inputs it is given (:mod:`.inputs`), the
checks at other shapes against a reference (:mod:`.checks`, :mod:`.references`), what torch is left in
(:mod:`.torch_state`) and the libraries' logs captured (:mod:`.logs`). Two kinds are still named here: the lean
route's families in the hint of an export that failed (:mod:`.torch_route`), detections in the check
(:mod:`.checks`)."""
