"""The source layer: one adapter per kind of model (:mod:`.registry` recognises, each ``<kind>.py`` opens, exports and
answers later steps' questions about its kind). See docs/architecture.md, "Adding a kind of model"."""
