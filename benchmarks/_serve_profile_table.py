"""The serve-profile generator of benchmarks/report.py: `serve_profile.py`'s record as a table of
milliseconds per decoding step, the products alone, their share and the rest (kept apart from
_report_tables.py, which imports it, to keep that file short)."""

from benchmarks._report_tables import caption, markdown_table, select


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
