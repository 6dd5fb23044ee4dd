"""Object detectors written as one file of flat tensors in and out: Ultralytics YOLO (``yolo_adapter.py``, the
adapter; ``yolo_export.py``, the network as a module with its box decoding) and torchvision's detectors
(``torchvision_adapter.py``; ``torchvision_export.py``: a list of images in, a list of dicts out, made flat). Their
``detections`` output is judged by :mod:`onnx_nb.results.detections` (boxes matched by image, class, IoU and
score)."""
