"""The Marian <-> our id mapping (keras_transformer.marian.ids), by hand-worked cases."""

import numpy as np
import pytest

from keras_transformer.marian.ids import BOS_LOGIT_BIAS, MarianIds


def test_import_mapping_of_an_opus_mt_vocabulary():
    ids = MarianIds(7, eos_id=0, unk_id=1, pad_id=6)
    # ours: pad, unk, bos (= Marian pad), eos, then Marian 2, 3, 4, 5.
    assert ids.marian_of_ours.tolist() == [6, 1, 6, 0, 2, 3, 4, 5]
    assert ids.ours_of_marian.tolist() == [3, 1, 4, 5, 6, 7, 0]
    assert ids.our_size == 8 and ids.decoder_start_id == 6
    assert ids.ours([[0, 5, 6]]).tolist() == [[3, 7, 0]]
    assert ids.marian([2, 3, 4]).tolist() == [6, 0, 2]
    rows = np.arange(7 * 2).reshape(7, 2)
    assert np.array_equal(ids.marian_rows(ids.our_rows(rows)), rows)
    bias = ids.our_output_bias(np.arange(7.0))
    assert bias.tolist() == [6.0, 1.0, BOS_LOGIT_BIAS, 0.0, 2.0, 3.0, 4.0, 5.0]


def test_export_mapping_is_a_permutation_with_a_real_bos():
    ids = MarianIds.for_export(6)
    # Marian: eos 0, unk 1, bos 2, our 4 and 5 at 3 and 4, pad last.
    assert ids.marian_of_ours.tolist() == [5, 1, 2, 0, 3, 4]
    assert ids.ours_of_marian.tolist() == [3, 1, 2, 4, 5, 0]
    assert ids.our_size == 6 and ids.decoder_start_id == 2
    assert ids.our_output_bias([1.0] * 6).tolist() == [1.0] * 6


@pytest.mark.parametrize("kwargs", [dict(eos_id=0, unk_id=0, pad_id=6), dict(eos_id=0, unk_id=1, pad_id=7),
                                    dict(eos_id=0, unk_id=1, pad_id=True)])
def test_bad_special_ids_are_refused(kwargs):
    with pytest.raises(ValueError, match="Marian"):
        MarianIds(7, **kwargs)


def test_export_mapping_with_a_pad_inside():
    # Separate vocabularies share the smaller one's last id as pad.
    ids = MarianIds.for_export(7, pad_id=4)
    assert ids.marian_of_ours.tolist() == [4, 1, 2, 0, 3, 5, 6]
    assert ids.ours_of_marian.tolist() == [3, 1, 2, 4, 0, 5, 6]
    with pytest.raises(ValueError, match="pad id"):
        MarianIds.for_export(7, pad_id=2)
