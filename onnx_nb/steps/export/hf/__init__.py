"""Hugging Face glue: loading, tasks and sample inputs (needs the ``hf`` extra)."""
