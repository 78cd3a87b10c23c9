"""Model sizes from the paper (Table 3) and a small one for tests and CPUs."""

PRESETS = {
    # Paper, Table 3, "base": ~65M parameters with a shared 37k vocabulary.
    "base": dict(
        d_model=512, d_ff=2048, num_heads=8,
        num_encoder_layers=6, num_decoder_layers=6, dropout=0.1,
    ),
    # Paper, Table 3, "big": ~213M parameters with a shared 37k vocabulary.
    "big": dict(
        d_model=1024, d_ff=4096, num_heads=16,
        num_encoder_layers=6, num_decoder_layers=6, dropout=0.3,
    ),
    # Small enough to train on two CPU cores; used by tests and benchmarks.
    "tiny": dict(
        d_model=256, d_ff=1024, num_heads=4,
        num_encoder_layers=3, num_decoder_layers=3, dropout=0.1,
    ),
}
