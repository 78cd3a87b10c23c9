"""Which ops a SavedModel needs, and whether TensorFlow Serving has them.

TensorFlow Serving 2.20 runs a SavedModel with core TensorFlow kernels plus
the TensorFlow Text ops it links (TF Text 2.20.0's `ops_lib`), without a
Python interpreter and with XLA disabled by default. An op outside that set
fails at load time with "Op type not registered" (tensorflow/serving#1490,
#2267), or at run time for XLA.

"Core TensorFlow" is decided as: registered in the op registry of a process
that imported `tensorflow` only (no TF Text, no other op library), minus a
deny-list: Python callbacks (`PyFunc`, `PyFuncStateless`, `EagerPyFunc`),
XLA ops (`Xla*`, e.g. `XlaCallModule` from JAX/torch exports or
`XlaDynamicUpdateSlice` from `slice_update`) and TPU ops. TF Text ops come
from an explicit allow-list. Functions marked for XLA compilation
(`jit_compile=True`, attribute `_XlaMustCompile`) are rejected as well.

Nothing here imports Keras; the registry is read in a subprocess, once per
process. Also runnable as `python -m keras_transformer.export.opcheck DIR`.
"""

import functools
import json
import os
import subprocess
import sys

__all__ = [
    "PYTHON_OPS",
    "TF_TEXT_OPS",
    "ServingOpsError",
    "check_serving_ops",
    "core_tensorflow_ops",
    "list_ops",
]

# Python callbacks: they need the Python interpreter that built the graph.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

# Prefixes of ops the pip TensorFlow registers but TF Serving cannot run on
# CPU without XLA (Xla*) or without a TPU system (TPU*).
DENIED_PREFIXES = ("Xla", "_Xla", "TPU", "_TPU")

# TensorFlow Text ops (the tokenization and normalization libraries of
# `tensorflow_text/python/ops/*.so`, listed by loading each library into a
# TensorFlow-only process; TF Text 2.21.1, all present since 2.12, so in the
# TF Text 2.20.0 that TF Serving 2.20 links).
TF_TEXT_OPS = frozenset(
    {
        # SentencePiece (keras_transformer.data.SubwordTokenizer uses the first three).
        "SentencepieceOp",
        "SentencepieceTokenizeOp",
        "SentencepieceDetokenizeOp",
        "SentencepieceTokenizeWithOffsetsOp",
        "SentencepieceIdToStringOp",
        "SentencepieceStringToIdOp",
        "SentencepieceVocabSizeOp",
        "TFText>FastSentencepieceTokenize",
        "TFText>FastSentencepieceDetokenize",
        # WordPiece, whitespace, regex and other tokenizers.
        "WordpieceTokenizeWithOffsets",
        "FastWordpieceTokenizeWithOffsets",
        "TFText>FastWordpieceDetokenize",
        "WhitespaceTokenizeWithOffsets",
        "TFText>WhitespaceTokenizeWithOffsetsV2",
        "RegexSplitWithOffsets",
        "UnicodeScriptTokenizeWithOffsets",
        "SplitMergeTokenizeWithOffsets",
        "TokenizerFromLogits",
        "PhraseTokenize",
        "TFText>PhraseDetokenize",
        "TFText>ByteSplitWithOffsets",
        "TFText>ByteSplitByOffsets",
        # Normalization, n-grams, trimming, sentence breaking.
        "CaseFoldUTF8",
        "NormalizeUTF8",
        "NormalizeUTF8WithOffsetsMap",
        "FindSourceOffsets",
        "FastBertNormalize",
        "TFText>NgramsStringJoin",
        "TFText>RoundRobinGenerateMasks",
        "TFText>RoundRobinTrim",
        "TFText>Utf8Binarize",
        "TFText>BoiseTagsToOffsets",
        "TFText>OffsetsToBoiseTags",
        "SentenceFragments",
        "SentenceFragmentsV2",
        "ConstrainedSequence",
        "MaxSpanningTree",
    }
)

_LIST_CORE_OPS = """
import json, sys
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
buffer = pywrap_tf_session.TF_GetAllOpList()
op_list = op_def_pb2.OpList()
op_list.ParseFromString(pywrap_tf_session.TF_GetBuffer(buffer))
json.dump(sorted(op.name for op in op_list.op), sys.stdout)
"""


class ServingOpsError(ValueError):
    """A SavedModel uses ops that TensorFlow Serving cannot run.

    Attributes:
        export_dir: the SavedModel directory.
        offending: dict op name -> reason.
    """

    def __init__(self, export_dir, offending):
        self.export_dir = export_dir
        self.offending = dict(offending)
        lines = "\n".join(f"  {op}: {reason}" for op, reason in sorted(self.offending.items()))
        super().__init__(
            f"{export_dir}: {len(self.offending)} op(s) that TensorFlow Serving 2.20 "
            f"(core TensorFlow + TF Text, no Python, no XLA) cannot run:\n{lines}"
        )


@functools.lru_cache(maxsize=1)
def core_tensorflow_ops():
    """Names of the ops registered by `import tensorflow` alone (a frozenset).

    Read in a fresh interpreter, so op libraries loaded into this process
    (TF Text, custom ops) do not count as core.
    """
    if not sys.executable:
        raise RuntimeError("cannot list TensorFlow's core ops: sys.executable is unknown")
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", _LIST_CORE_OPS],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(
            "cannot list TensorFlow's core ops (a subprocess importing tensorflow "
            f"failed with exit code {result.returncode}):\n{result.stderr[-2000:]}"
        )
    return frozenset(json.loads(result.stdout))


def _read_saved_model(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2

    export_dir = os.fspath(export_dir)
    binary = os.path.join(export_dir, "saved_model.pb")
    text = os.path.join(export_dir, "saved_model.pbtxt")
    saved_model = saved_model_pb2.SavedModel()
    if os.path.isfile(binary):
        with open(binary, "rb") as stream:
            saved_model.ParseFromString(stream.read())
    elif os.path.isfile(text):
        from google.protobuf import text_format

        with open(text, encoding="utf-8") as stream:
            text_format.Parse(stream.read(), saved_model)
    else:
        raise FileNotFoundError(
            f"{export_dir}: no saved_model.pb or saved_model.pbtxt (not a SavedModel directory)"
        )
    return saved_model


def _serving_graphs(export_dir, saved_model):
    graphs = [
        meta_graph.graph_def
        for meta_graph in saved_model.meta_graphs
        if "serve" in meta_graph.meta_info_def.tags
    ]
    if not graphs:
        tags = [list(m.meta_info_def.tags) for m in saved_model.meta_graphs]
        raise ValueError(
            f"{export_dir}: no MetaGraph tagged 'serve' (TF Serving loads that tag); found {tags}"
        )
    return graphs


def _is_true(attr_value):
    return attr_value.WhichOneof("value") == "b" and attr_value.b


def _scan(graphs):
    """(op name -> where used, names of XLA-compiled functions or call nodes)."""
    uses = {}
    xla_compiled = set()
    for graph in graphs:
        function_names = {function.signature.name for function in graph.library.function}
        bodies = [("graph", graph.node)] + [
            (function.signature.name, function.node_def) for function in graph.library.function
        ]
        for function in graph.library.function:
            if "_XlaMustCompile" in function.attr and _is_true(function.attr["_XlaMustCompile"]):
                xla_compiled.add(function.signature.name)
        for where, nodes in bodies:
            for node in nodes:
                if "_XlaMustCompile" in node.attr and _is_true(node.attr["_XlaMustCompile"]):
                    xla_compiled.add(f"{where}/{node.name}")
                # A node whose type names a library function is a call, not an op.
                if node.op in function_names:
                    continue
                uses.setdefault(node.op, set()).add(where)
    return uses, xla_compiled


def list_ops(export_dir):
    """Sorted names of every op in a SavedModel's 'serve' graph and its functions.

    The same list as `saved_model_cli show --dir DIR --tag_set serve --list_ops`.
    """
    saved_model = _read_saved_model(export_dir)
    uses, _ = _scan(_serving_graphs(export_dir, saved_model))
    return sorted(uses)


def _reason(op, core_ops, allowed, allow_xla=False):
    if op in PYTHON_OPS:
        return "Python callback (tf.py_function / tf.numpy_function): needs the Python interpreter"
    if op.startswith(DENIED_PREFIXES[:2]) and allow_xla:
        return None
    if op.startswith(DENIED_PREFIXES[:2]):
        return "XLA op: TF Serving runs without XLA by default"
    if op.startswith(DENIED_PREFIXES[2:]):
        return "TPU op: not available on a CPU/GPU TF Serving"
    if op in allowed or op in TF_TEXT_OPS:
        return None
    if op in core_ops:
        return None
    return "not a core TensorFlow op nor a TF Text op that TF Serving links (custom op library?)"


def check_serving_ops(export_dir, *, extra_allowed_ops=(), allow_xla=False):
    """Lists the ops of a SavedModel and fails on any TF Serving cannot run.

    Args:
        export_dir: a SavedModel directory (e.g. `BASE/NAME/VERSION`).
        extra_allowed_ops: more op names to accept (ops of custom libraries
            linked into your own TF Serving build).
        allow_xla: accept XLA ops and XLA-compiled functions (an export
            for TF Serving started with `--xla_cpu_compilation_enabled`, or
            on GPU); everything else is checked as usual.

    Returns:
        The sorted list of op names used by the 'serve' MetaGraph (graph and
        every function of its library).

    Raises:
        ServingOpsError: naming every offending op (Python callbacks, XLA or
            TPU ops, ops unknown to core TensorFlow and TF Text) and every
            function compiled with XLA (`jit_compile=True`).
        FileNotFoundError / ValueError: not a SavedModel, or no 'serve' tag.
    """
    export_dir = os.fspath(export_dir)
    saved_model = _read_saved_model(export_dir)
    uses, xla_compiled = _scan(_serving_graphs(export_dir, saved_model))
    core_ops = core_tensorflow_ops()
    allowed = frozenset(extra_allowed_ops)
    offending = {}
    for op, where in uses.items():
        reason = _reason(op, core_ops, allowed, allow_xla)
        if reason is not None:
            places = sorted(where)
            shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
            offending[op] = f"{reason} (in {shown})"
    for name in sorted(() if allow_xla else xla_compiled):
        offending[f"_XlaMustCompile[{name}]"] = (
            "function compiled with XLA (jit_compile=True): TF Serving runs without XLA by default"
        )
    if offending:
        raise ServingOpsError(export_dir, offending)
    return sorted(uses)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(
        description="List a SavedModel's ops and fail on any TensorFlow Serving 2.20 cannot run."
    )
    parser.add_argument("export_dir")
    parser.add_argument("--allow", action="append", default=[], help="extra op name to accept")
    parser.add_argument("--allow-xla", action="store_true",
                        help="accept XLA (an export served with --xla_cpu_compilation_enabled or on GPU)")
    args = parser.parse_args(argv)
    try:
        ops = check_serving_ops(args.export_dir, extra_allowed_ops=args.allow, allow_xla=args.allow_xla)
    except (ServingOpsError, FileNotFoundError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    print("\n".join(ops))
    print(
        f"{len(ops)} ops, all core TensorFlow (this process's TensorFlow registry) or TF Text ops "
        "that TF Serving links; no Python callbacks, no XLA.",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
