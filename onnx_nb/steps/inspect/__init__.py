"""Reading a file's structure (``summary``) and two files side by side (``compare``): no weights loaded, no
session opened. The JupyterLab viewer and the cell functions share these."""
