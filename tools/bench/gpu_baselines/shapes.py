"""Model shapes of the GPU baselines (random weights; LLaMA architecture): the same as
tools/bench/bench_sizes.h gives rlfuse's benchmarks (smollm2, qwen05, qwen15)."""
SHAPES = {
    "smollm2": dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                    intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True),
    "qwen05": dict(num_hidden_layers=24, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
                   intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "qwen15": dict(num_hidden_layers=28, hidden_size=1536, num_attention_heads=12, num_key_value_heads=2,
                   intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
}


def llama_config(name, **extra):
    from transformers import LlamaConfig
    return LlamaConfig(**SHAPES[name], max_position_embeddings=2048, rope_theta=100000.0, rms_norm_eps=1e-5, **extra)
