"""Where a speech LLM's config names its audio token and its audio tower: read by the adapter's recognition (no
torch) and by the export's parts alike."""

from __future__ import annotations

AUDIO_TOKENS = ("audio_token_id", "audio_token_index")
AUDIO_TOWERS = ("audio_config", "encoder_config", "audio_encoder_config")  # the audio tower's config
