"""A tiny MarianMT folder written by Transformers, for the tokenizer and import tests.

SentencePiece models trained here on a few hundred short sentences (one per
side, as OPUS-MT has), a `vocab.json` in Marian's order (`</s>` 0, `<unk>` 1,
language codes, the pieces of both models, `<pad>` last), saved by
Transformers' own `MarianTokenizer.save_pretrained`, and, with `model=True`,
a `MarianMTModel` with random weights saved by `save_pretrained`.
`transformers_translate` is the reference the Marian tests hold our runs to.
"""

import io
import json
import random
import warnings

import sentencepiece

WORDS_EN = "the a house cat dog sees small big red green runs walks quickly today old new river".split()
WORDS_DE = "das ein Haus Katze Hund sieht klein groß rot grün läuft geht schnell heute alt neu Fluss".split()
LANGUAGE_CODES = (">>deu<<", ">>fra<<")


def sentences(words, count, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))).capitalize() + rng.choice(".!?")
            for _ in range(count)]


def _train_spm(lines, size):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=size, hard_vocab_limit=False,
        character_coverage=1.0, num_threads=1, minloglevel=2)
    return model.getvalue()


def _pieces(proto):
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def _marian_vocabulary(*piece_lists, codes=()):
    vocabulary = {"</s>": 0, "<unk>": 1}
    for piece in (*codes, *(p for pieces in piece_lists for p in pieces)):
        vocabulary.setdefault(piece, len(vocabulary))
    vocabulary["<pad>"] = len(vocabulary)
    return vocabulary


def make_marian_folder(folder, *, separate_vocabs=False, model=False, seed=0):
    """Writes the folder; returns it (a pathlib.Path)."""
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    source, target = _train_spm(sentences(WORDS_EN, 300, seed), 60), _train_spm(sentences(WORDS_DE, 300, seed), 60)
    work = folder / "parts"
    work.mkdir()
    (work / "source.spm").write_bytes(source)
    (work / "target.spm").write_bytes(target)
    options = {}
    if separate_vocabs:
        vocabulary = _marian_vocabulary(_pieces(source), codes=LANGUAGE_CODES)
        target_vocabulary = _marian_vocabulary(_pieces(target))
        (work / "target_vocab.json").write_text(json.dumps(target_vocabulary))
        options = {"target_vocab_file": str(work / "target_vocab.json"), "separate_vocabs": True}
    else:
        vocabulary = target_vocabulary = _marian_vocabulary(_pieces(source), _pieces(target), codes=LANGUAGE_CODES)
    (work / "vocab.json").write_text(json.dumps(vocabulary))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tokenizer = MarianTokenizer(str(work / "source.spm"), str(work / "target.spm"), str(work / "vocab.json"),
                                    **options)
    tokenizer.save_pretrained(str(folder))
    for part in work.iterdir():
        part.unlink()
    work.rmdir()
    if model:
        _save_model(folder, len(vocabulary), len(target_vocabulary), separate_vocabs, seed)
    return folder


def _save_model(folder, size, target_size, separate_vocabs, seed):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    # Transformers gives both embeddings pad_token_id as padding index: it must lie in each.
    pad_id = min(size, target_size) - 1
    config = MarianConfig(
        vocab_size=size, decoder_vocab_size=target_size, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=64, activation_function="swish", pad_token_id=pad_id, eos_token_id=0,
        decoder_start_token_id=pad_id, forced_eos_token_id=0, share_encoder_decoder_embeddings=not separate_vocabs,
        scale_embedding=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        init_std=0.3,  # large enough that outputs vary with the source
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        # Random output biases, so that an import that drops them is seen.
        model.final_logits_bias.normal_(0.0, 0.3)
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 32
    model.generation_config.bad_words_ids = [[pad_id]]
    model.save_pretrained(str(folder))


def transformers_translate(folder, texts, extra, **flags):
    """Transformers' translations (`MarianMTModel.generate` with `flags`, decoded by
    `MarianTokenizer`) of `texts` by the MarianMT folder, one sentence at a time: its
    limit is absolute, set to ours (the source tokens, EOS included, + `extra`) + the
    decoder start."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tokenizer = MarianTokenizer.from_pretrained(str(folder))
    model = MarianMTModel.from_pretrained(str(folder)).eval()
    outputs = []
    for text in texts:
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            output = model.generate(ids, do_sample=False, max_length=ids.shape[1] + extra + 1, **flags)
        outputs.append(tokenizer.decode(output[0], skip_special_tokens=True))
    return outputs
