"""The special tokens every part of the package agrees on: ids and SentencePiece pieces.

One home, with no TensorFlow or Keras dependency, so that the tokenizer, the
searches, the data pipeline and the exports (including the CTranslate2 one,
which runs without TensorFlow) read the same values.
"""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"
