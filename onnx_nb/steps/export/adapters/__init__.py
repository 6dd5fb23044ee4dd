"""The kinds' protocol and registry: :mod:`.base` (the :class:`~.base.Adapter` an adapter subclasses and its
defaults) and :mod:`.registry` (the ordered rows that recognise a model, the generation shapes, each naming a kind's
package in ``onnx_nb/kinds/`` by dotted path). See docs/architecture.md, "Adding a kind of model"."""
