"""Speech LLMs (an audio tower whose features fill a causal LM's audio tokens: Voxtral, Qwen2-Audio, Granite Speech,
...): recognised and refused with a clear error for now (``adapter.py``); their export lands here as one package."""
