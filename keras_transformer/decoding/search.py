"""Greedy and beam search over the model's incremental decoder.

Only search lives here: the searches drive any decoder with the step API of
`keras_transformer.models.incremental` (`initial_state`, `step`, `reorder`;
built by `Transformer.incremental_decoder`), and `compiled.py` compiles them
per backend. Everything is `keras.ops` (loops with `keras.ops.while_loop`),
so it runs under TensorFlow, JAX and PyTorch, and inside a TensorFlow graph
built without autograph or XLA (a SavedModel export): no Python `if`/`while`
on tensors, and every loop variable keeps a fixed shape within a loop
(pre-allocated buffers written in place of padding).

A search decodes in phases, one `ops.while_loop` each: the decoder's state
(its key/value caches) first has room for 16 target positions, then 32, 64
and 128 (`PHASE_CAPACITIES`), then the whole output buffer; between phases
it grows (`decoder.grow`, appending room at the end, so nothing written
moves). A step attends over all the positions its state has room for
(masked beyond those written), so up to 128 positions it costs at most
about what twice the positions written so far would, not what the whole
buffer does, while every loop keeps fixed shapes. The search's own buffers (tokens, finished
hypotheses) keep the buffer's width throughout. With a buffer length known
at trace time (JAX, PyTorch, TensorFlow run eagerly) only the capacities
below it get a phase; in a TensorFlow graph with a dynamic source width
every capacity below a static bound gets one (`compiled.run` traces a
search once per width class of its batches; an export, for any width, gets
them all), capped at the buffer length, and those past it run no step. The
outputs do not depend on the phases.

Between phases, where shapes may change (`phases.compacts`: TensorFlow
without XLA, i.e. the plain graph, eager mode and the SavedModel's plain
variant; PyTorch), a search drops the sentences that are done: the next
phase decodes only the others, their loop state, decoder state
(`decoder.select`: cross-attention keys and values gathered, no
re-encoding) and per-sentence inputs (limits, prefixes, random numbers)
gathered, and each phase's results are scattered back into the whole
batch's state, from which the outputs are built. A sentence that is done
changes nothing at later steps, so the outputs are those of the whole
batch. Under XLA and JAX (static shapes) every phase carries the whole
batch, unless the search is traced under `phases.static_row_buckets(n)`
(the XLA SavedModel's `xla_phase_buckets`): then each later phase decodes
the smallest of n row buckets (the batch, half, a quarter, ...) that holds
the sentences not done. Decoders without `select` (the uncached one, step
functions) run as before.

Conventions shared by both searches:

- Source ids are (batch, source_length) int ids padded with `pad_id`, as the
  model was trained on (the data pipeline appends EOS to every source).
- A sentence may produce at most `source_length + max_extra_length` tokens,
  where source_length is its own count of non-pad ids (EOS included); the
  output buffer is `padded_source_length + max_extra_length` wide. An optional
  `max_output_length` caps both. `limit_rule` says what becomes of a hypothesis
  that reaches its limit without EOS (`LIMIT_RULES`): "fallback"
  (tensor2tensor, the default) returns it only when no hypothesis of its
  sentence ended with EOS; "force_eos" (fairseq) allows only EOS at the
  last position, so every hypothesis ends and pays for its EOS; "finish"
  (CTranslate2) finishes it as it is, unpaid, competing with those that
  ended. Greedy search and sampling have one hypothesis: "fallback" and
  "finish" return it as it is, "force_eos" ends it with EOS.
- Reported lengths count the generated tokens *including* EOS, as GNMT,
  tensor2tensor, Transformers and CTranslate2 do; the length penalty uses
  that length: score = log P / lp, lp = ((5 + length) / 6) ** alpha under
  "gnmt" (the default), length ** alpha under "length" (Marian's and
  Transformers' rule; `penalty.LENGTH_PENALTIES`).
- Output ids hold the generated tokens (no BOS), EOS where the hypothesis
  ended, then `pad_id` (0) up to the buffer width.
- `pad_id` and `bos_id` are never generated (their log-probabilities are set
  to -inf, without renormalising); EOS is also forbidden while fewer than
  `min_length` tokens precede it.

Beam search is the standard algorithm of GNMT and tensor2tensor: at each
step the `2 * beam_size` best extensions of the live hypotheses are taken;
those that finish (EOS; under "finish" also the length limit) enter a separate finished set
(the `beam_size` best by final score), the best `beam_size` others stay live.
A finished hypothesis never competes with live ones for a slot, and the best
finished one is returned (under "fallback", the best live one at the limit
when none finished). A sentence stops early only when no live
hypothesis can beat the worst kept finished one even under the most
favourable length penalty it could reach (the one at its limit, since log P
only falls): a bound that never changes the result under any rule (a
hypothesis at its limit scores at most log P / lp(limit) under "finish",
less under "force_eos", which adds an EOS term, and under "fallback" it
competes only when nothing finished, when no early stop happens).

The pieces, one concept a module: `options` (argument checks), `inputs`
(the input contract), `phases` (limits, buffer, the phased loop),
`candidates` (allowed tokens and the top-k), `constraints` (prefixes and
n-gram blocking), `greedy` (greedy search and sampling), `beam` (beam
search), `penalty` (the length penalties), `step_function` (driving a
search with a hand-written model). This module gathers the public API.
"""

from keras_transformer.decoding.beam import BeamState, beam_search  # noqa: F401
from keras_transformer.decoding.candidates import BLOCKWISE_TOP_K_MIN_VOCABULARY  # noqa: F401  (read-only here)
from keras_transformer.decoding.greedy import greedy_search, sampling_search  # noqa: F401
from keras_transformer.decoding.options import LIMIT_RULES, check_limit_rule, check_sampling_options  # noqa: F401
from keras_transformer.decoding.penalty import LENGTH_PENALTIES, length_penalty  # noqa: F401
from keras_transformer.decoding.phases import PHASE_CAPACITIES  # noqa: F401  (read-only here)
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: F401  (re-exported)
