"""MarianMT / OPUS-MT checkpoints: the id mapping (`ids`), reading checkpoint
folders (`checkpoint`; OPUS-MT releases in `opus_mt`) and converting to and
from our `Transformer` (`convert`)."""
