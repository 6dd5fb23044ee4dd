"""A plain ``torch.nn.Module`` and its sample, or a PyTorch checkpoint file: the row that takes every PyTorch model no
other row claims. ``adapter.py`` is the adapter (:class:`~.adapter.TorchAdapter`) and ``export_part``, which the
multi-file kinds export each part with."""
