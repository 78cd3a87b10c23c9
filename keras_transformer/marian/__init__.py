"""MarianMT / OPUS-MT checkpoints: the id mapping (`ids`), reading checkpoint
folders (`checkpoint`) and converting to and from our `Transformer` (`convert`)."""
