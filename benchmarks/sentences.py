"""Real sentences of mixed lengths, as a batch a user would send (most short, a few long)."""

SHORT = [
    "The quarterly report shows revenue growing faster than expected across all regions this year.",
    "Please remember to water the plants on the balcony while I am away next week.",
    "The new bridge across the river will open to traffic at the end of the month.",
    "Researchers found that sleeping well improves memory and the ability to learn new skills.",
    "Our flight was delayed by three hours because of a storm over the mountains.",
    "She finished the marathon in under four hours despite the heat and the hills.",
]
LONG = [
    "Transformer models have become the standard architecture for natural language processing, and "
    "converting them to ONNX lets teams deploy the same model across servers, browsers and phones with "
    "one runtime; yet the conversion is only worth it when the exported graph computes what the original "
    "model computes, runs faster on the hardware at hand, and keeps its accuracy after optimization and "
    "quantization, which is why every step of the pipeline is measured and verified before anything ships "
    "to production, where a silent numeric regression would be far more expensive to find and fix later.",
    "The city council met on Tuesday evening to discuss the proposed changes to the public transport "
    "network, including new bus routes connecting the northern suburbs with the university campus, longer "
    "opening hours for the underground on weekends, a simplified fare system with a single monthly ticket "
    "valid on every line, and a pilot programme of electric ferries on the river, all of which the mayor "
    "said would be funded by the regional government together with a modest increase in parking charges in "
    "the city centre over the next three years, subject to a public consultation starting in the spring.",
]
BATCH = SHORT + LONG  # 8 sentences: six of 15-20 tokens, two that fill most of the 128 positions

# a few words each, as search queries and chat turns are: one outlier channel of [CLS] sets dynamic INT8's scale
# for the whole of such a short tensor (onnx_nb/steps/variants/outlier_channels.py)
FEW_WORDS = ["Hello world", "Hi", "ok", "Yes!", "dog", "42", "Berlin", "Thank you very much", "What time is it?",
             "sell", "How do I reset my password?", "This movie was terrible."]
