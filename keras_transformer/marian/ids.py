"""The one mapping between a Marian vocabulary's ids and ours.

Marian (and Transformers' MarianMT) puts EOS at 0, UNK at 1 and PAD last, and
starts decoding from PAD, whose embedding row is zero. We have fixed special
ids (`keras_transformer.data.special_tokens`: pad 0, unk 1, bos 2, eos 3). The
mapping, for one vocabulary (a model with separate source and target
vocabularies has one `MarianIds` per side):

    ours 0 (pad)  = Marian pad
    ours 1 (unk)  = Marian unk
    ours 2 (bos)  = Marian's decoder start: a copy of the pad row on import
                    (`bos_id=None`: our vocabulary is Marian's + 1, and the
                    row's output bias is `BOS_LOGIT_BIAS`, so it never wins and
                    adds nothing to the softmax normaliser), or a real Marian
                    id (`bos_id` given: same size, as written by the
                    `marian-hf` export, whose `decoder_start_token_id` points
                    at it)
    ours 3 (eos)  = Marian eos
    ours 4..      = the other Marian ids, in Marian's order

Rows of any per-token array (embeddings, output bias) map as
`ours_array = marian_array[marian_of_ours]`; ids map through `ours_of_marian`
and `marian_of_ours`. Only numpy here, so that checkpoint readers, the
converter and the tokenizer share it without a backend.
"""

import numpy as np

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# The output bias of our BOS row in an imported model: exp(-1e9 - max) is 0 in
# float32, so the softmax over our vocabulary equals Marian's over its own.
BOS_LOGIT_BIAS = -1e9

_OUR_SPECIALS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)


class MarianIds:
    """The id mapping for one Marian vocabulary of `size` ids.

    Args:
        size: Marian's vocabulary size (the embedding's rows).
        eos_id, unk_id, pad_id: Marian's special ids (0, 1 and size - 1 in
            every OPUS-MT model; taken from the configuration all the same).
        bos_id: None when Marian has no BOS of its own (an imported model: our
            BOS is an extra row, a copy of pad's); else the Marian id that is
            our BOS (a model written by us).

    Attributes:
        our_size: our vocabulary size: `size + 1` when `bos_id` is None, else
            `size`.
        marian_of_ours: int array (our_size,), the Marian id of each of our ids
            (our BOS gives pad's id when `bos_id` is None).
        ours_of_marian: int array (size,), our id of each Marian id.
    """

    def __init__(self, size, eos_id, unk_id, pad_id, bos_id=None):
        size = int(size)
        specials = {"eos_id": eos_id, "unk_id": unk_id, "pad_id": pad_id}
        if bos_id is not None:
            specials["bos_id"] = bos_id
        for name, value in specials.items():
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value < size:
                raise ValueError(f"Marian {name} must be an id in [0, {size}), got {value!r}")
        if len(set(int(value) for value in specials.values())) != len(specials):
            raise ValueError(f"Marian special ids must differ, got {specials}")
        self.size = size
        self.eos_id, self.unk_id, self.pad_id = int(eos_id), int(unk_id), int(pad_id)
        self.bos_id = None if bos_id is None else int(bos_id)
        special_set = {int(value) for value in specials.values()}
        others = [marian for marian in range(size) if marian not in special_set]
        bos_source = self.pad_id if self.bos_id is None else self.bos_id
        # The order of _OUR_SPECIALS is ours 0..3.
        self.marian_of_ours = np.array([self.pad_id, self.unk_id, bos_source, self.eos_id] + others, dtype=np.int64)
        self.our_size = len(self.marian_of_ours)
        ours_of_marian = np.empty((size,), dtype=np.int64)
        ours_of_marian[self.marian_of_ours[4:]] = np.arange(4, self.our_size)
        ours_of_marian[self.pad_id] = PAD_ID
        ours_of_marian[self.unk_id] = UNK_ID
        ours_of_marian[self.eos_id] = EOS_ID
        if self.bos_id is not None:
            ours_of_marian[self.bos_id] = BOS_ID
        self.ours_of_marian = ours_of_marian

    @classmethod
    def for_export(cls, our_size, pad_id=None):
        """The Marian order our `marian-hf` export writes for a vocabulary of
        `our_size` ids: eos 0, unk 1, bos 2 (the decoder start), then our ids
        4.. in order with pad at `pad_id` (default: last, Marian's place), so
        Marian's size is ours."""
        if our_size < 5:
            raise ValueError(f"a vocabulary needs the 4 special ids and at least one more, got {our_size} ids")
        pad_id = our_size - 1 if pad_id is None else pad_id
        if not 3 <= pad_id < our_size:
            raise ValueError(f"the exported pad id must be in [3, {our_size}), got {pad_id}")
        return cls(our_size, eos_id=0, unk_id=1, pad_id=pad_id, bos_id=2)

    @property
    def decoder_start_id(self):
        """The Marian id decoding starts from: pad on import, our BOS's id when
        it is a real Marian id."""
        return self.pad_id if self.bos_id is None else self.bos_id

    def ours(self, marian_ids):
        """Our ids of Marian ids (any integer array or nested list)."""
        return self.ours_of_marian[np.asarray(marian_ids, dtype=np.int64)]

    def marian(self, our_ids):
        """Marian ids of our ids (our BOS gives Marian's decoder start)."""
        return self.marian_of_ours[np.asarray(our_ids, dtype=np.int64)]

    def our_rows(self, marian_rows):
        """Our per-token rows (axis 0) of a Marian per-token array: embedding
        rows, or an output bias (whose BOS entry the caller sets)."""
        marian_rows = np.asarray(marian_rows)
        if marian_rows.shape[0] != self.size:
            raise ValueError(f"expected {self.size} rows (the Marian vocabulary), got shape {marian_rows.shape}")
        return marian_rows[self.marian_of_ours]

    def our_output_bias(self, marian_bias=None, dtype="float32"):
        """Our output bias from Marian's (`final_logits_bias`; zeros if None):
        its entries in our order, with `BOS_LOGIT_BIAS` for an extra BOS row."""
        if marian_bias is None:
            marian_bias = np.zeros((self.size,), dtype=dtype)
        bias = self.our_rows(np.asarray(marian_bias, dtype=dtype).reshape(-1)).copy()
        if self.bos_id is None:
            bias[BOS_ID] = BOS_LOGIT_BIAS
        return bias

    def marian_rows(self, our_rows):
        """Marian's per-token rows (axis 0) from ours: the inverse of
        `our_rows` (an extra BOS row is dropped)."""
        our_rows = np.asarray(our_rows)
        if our_rows.shape[0] != self.our_size:
            raise ValueError(f"expected {self.our_size} rows (our vocabulary), got shape {our_rows.shape}")
        return our_rows[self.ours_of_marian]

    def __repr__(self):
        return (f"MarianIds(size={self.size}, eos_id={self.eos_id}, unk_id={self.unk_id}, "
                f"pad_id={self.pad_id}, bos_id={self.bos_id})")
