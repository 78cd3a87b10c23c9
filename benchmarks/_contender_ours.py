"""Ours as a benchmark contender: `keras_transformer.Transformer` ("tiny" preset at the given size),
our loss and `paper_optimizer`, and `decoding.Translator` (beam search with the GNMT length penalty,
XLA) for decoding. See _contender.py for the shape."""

from benchmarks._contender import SEARCH, Contender, compile_ours, set_policy


class Ours(Contender):
    def __init__(self, name="ours-tf", label="ours, TensorFlow, plain graph", backend="tensorflow",
                 jit_compile=False, policy=None):
        self.name, self.label, self.backend = name, label, backend
        self.jit_compile, self.policy = jit_compile, policy

    def build(self, size, policy=None, optimizer=None):
        import keras_transformer as kt

        set_policy(policy or self.policy)
        model = kt.Transformer.from_preset(
            "tiny", vocabulary_size=size["vocab"], d_model=size["d_model"], num_heads=size["heads"],
            d_ff=size["d_ff"], num_encoder_layers=size["layers"], num_decoder_layers=size["layers"],
            dropout=size["dropout"],
        )
        return compile_ours(model, size["d_model"], jit_compile=self.jit_compile, optimizer=optimizer)

    def decode(self, model, tokenizer, sources, search=SEARCH):
        from keras_transformer.decoding import Translator

        translator = Translator(model, tokenizer, beam_size=search["beam_size"], alpha=search["alpha"],
                                max_extra_length=search["max_extra_length"],
                                max_source_length=search["max_source_length"], batch_size=search["batch_size"],
                                jit_compile=True)
        return translator.translate(sources)

    @staticmethod
    def search_description(search=SEARCH):
        return f"beam {search['beam_size']}, alpha {search['alpha']}, XLA"


THROUGHPUT = {
    "ours-tf": Ours(),
    "ours-tf-xla": Ours("ours-tf-xla", "ours, TensorFlow, XLA", jit_compile=True),
    "ours-jax": Ours("ours-jax", "ours, JAX (jit)", backend="jax", jit_compile=True),
    # Mixed precision (bfloat16 matmuls, float32 weights and loss): AMX/AVX512-BF16 CPUs run
    # bfloat16 matmuls ~2x faster. Same model, other numerics: compared with each other.
    "ours-tf-bf16": Ours("ours-tf-bf16", "ours, mixed_bfloat16, plain graph", policy="mixed_bfloat16"),
}
