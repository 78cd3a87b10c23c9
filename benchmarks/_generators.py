"""benchmarks/report.py's table generators by marker name: those of _report_tables.py, and those
built here for the scripts whose records carry their own table shape (limit_rule.py,
torch_blocking.py, shortlist_quality.py, quantize_quality.py, serve_mix.py, decode_variants.py: `table_parts(record)`) and for serve_profile.py's record (that script imports
TensorFlow, so its table is built here)."""

import importlib

from benchmarks._report_tables import (
    caption, complexity_table, data_scale_table, gpu_table, markdown_table, profile_table, quality_table, select,
    serve_summary, serve_table, throughput_table, variants_table)


def script_table(module, marker):
    """The generator of a benchmark script whose `table_parts(record)` gives (what, header, rows[, align]):
    limit_rule.py, torch_blocking.py (imported when a table needs it: they import more than the report)."""
    def table(records, options):
        parts = importlib.import_module(f"benchmarks.{module}").table_parts
        record = select(records, options, f"table:{marker}")[-1]
        what, header, rows, *align = parts(record)
        return caption(record, what) + "\n\n" + markdown_table(header, rows, *align)
    return table


limit_rule_table = script_table("limit_rule", "limit-rule")
torch_blocking_table = script_table("torch_blocking", "torch-blocking")
shortlist_quality_table = script_table("shortlist_quality", "shortlist-quality")
quantize_quality_table = script_table("quantize_quality", "quantize-quality")
serve_mix_table = script_table("serve_mix", "serve-mix")


def decode_variants_table(records, options):
    """decode_variants.py: one table of every record the marker selects (one kind: the float32 and
    int8 speed records side by side), a caption line each."""
    parts = importlib.import_module("benchmarks.decode_variants").table_parts
    chosen = select(records, options, "table:decode-variants")
    if len({record["kind"] for record in chosen}) > 1:
        raise ValueError(f"table:decode-variants {options}: records of different kinds; pin one kind")
    captions, rows = [], []
    for record in chosen:
        what, header, more, align = parts(record)
        captions.append(caption(record, what))
        rows += more
    return "\n".join(captions) + "\n\n" + markdown_table(header, rows, align)



def serve_profile_table(records, options):
    record = select(records, options, "table:serve-profile")[-1]
    workload = record["workload"]
    rows = []
    for key, timing in record["ms_per_step"].items():
        precision, variant = key.split(", ")
        step, products = timing["step"], timing["products"]
        rows.append([precision, variant, f"{step:.1f}", f"{products:.1f} ({products / step:.0%})",
                     f"{step - products:.1f}"])
    what = (f"{workload['preset']} preset, {workload['vocabulary']}-piece vocabulary, {workload['rows']} rows "
            f"({workload['batch']} sources x beam {workload['beam_size']}), {workload['steps']} steps; "
            "milliseconds per step, best of the calls")
    return caption(record, what) + "\n\n" + markdown_table(
        ["precision", "variant", "model step", "products alone", "rest"], rows,
        ["---", "---", "---:", "---:", "---:"])


GENERATORS = {
    "serve": ("serve", serve_table),
    "serve-profile": ("serve_profile", serve_profile_table),
    "serve-shortlist": ("serve_shortlist", serve_table),
    "shortlist-quality": ("shortlist_quality", shortlist_quality_table),
    "quantize-quality": ("quantize_quality", quantize_quality_table),
    "serve-summary": ("serve", serve_summary),
    "train-throughput": ("train_throughput", throughput_table),
    "train-variants": ("train_variants", variants_table),
    "train-profile": ("train_profile", profile_table),
    "quality": ("quality", quality_table),
    "gpu": ("gpu", gpu_table),
    "complexity": ("complexity", complexity_table),
    "data-scale": ("data_scale", data_scale_table),
    "limit-rule": ("limit_rule", limit_rule_table),
    "torch-blocking": ("torch_blocking", torch_blocking_table),
    "serve-mix": ("serve_mix", serve_mix_table),
    "decode-variants": ("decode_variants", decode_variants_table),
}
