"""The serving benchmarks' table generators (serve.py, serve.py --real-text, serve_profile.py, serve_mix.py)
for benchmarks/report.py: each turns a benchmark's records into the Markdown between a document's markers."""

import statistics
from collections import OrderedDict

from benchmarks._harness import markdown_table
from benchmarks._report_tables import caption, command_text, machine_text, median_ratio, record_table, select


def serve_rates(record):
    """{search: {contender: [sentences/s per round]}} of a serve.py record."""
    batch = record["workload"]["batch"]
    return {search: {name: [batch / s for s in seconds] for name, seconds in contenders.items()}
            for search, contenders in record["seconds"].items()}


# The references a serve table gives ratios to, each where its record has it: a record made with
# `serve.py --no-in-process` has no "ours in process" row.
SERVE_COLUMNS = (("ours in process, XLA", "vs ours XLA"), ("CTranslate2 float32", "vs CT2 float32"),
                 ("CTranslate2 int8", "vs CT2 int8"), ("CTranslate2 int8 + vmap", "vs CT2 int8 + vmap"))


def serve_table(records, options):
    record = select(records, options, "table:serve")[-1]
    rates = serve_rates(record)
    searches = list(rates)
    rounds = len(next(iter(record["seconds"][searches[0]].values())))
    columns = [(reference, label) for reference, label in SERVE_COLUMNS
               if any(reference in rates[search] for search in searches)]
    header = ["contender"]
    for search in searches:
        header += [f"beam {record['workload']['beam_size']}" if search == "beam" else search]
        header += [label for _, label in columns]
    names = list(OrderedDict.fromkeys(name for search in searches for name in rates[search]))
    rows = []
    for name in names:
        row = [name.replace(" (translate_ids)", "")]
        for search in searches:
            values = rates[search].get(name)
            if values is None:
                row += ["-"] * (1 + len(columns))
                continue
            row.append(f"{statistics.median(values):.1f}")
            row += [f"{median_ratio(values, rates[search][reference]):.2f}x" if reference in rates[search] else "-"
                    for reference, _ in columns]
        rows.append(row)
    return caption(record, f"sentences/s, medians of {rounds} rounds; ratios are medians of the same-round "
                           "ratios") + "\n\n" + markdown_table(header, rows)


def serve_real_table(records, options):
    """serve.py --real-text: each contender over the whole request stream, and its ratio to CTranslate2 int8 like
    for like (given the same shortlist as its vocabulary map, or no list on either side)."""
    timed = [r for r in select(records, options, "table:serve-real") if "contenders" in r]
    if not timed:
        raise ValueError(f"table:serve-real: the records matching {options} are gate refusals, with no timings")
    record = timed[-1]
    work, contenders, rows = record["workload"], record["contenders"], []
    for name, result in contenders.items():
        seconds, reference = result["seconds"], contenders.get("CTranslate2 int8" + " + vmap" * result["shortlist"])
        rows.append([name, result["path"], result["precision"], "yes" if result["shortlist"] else "no",
                     f"{statistics.median(work['sentences'] / s for s in seconds):.1f}",
                     f"{statistics.median(result['target_tokens'] / s for s in seconds):.0f}",
                     f"{median_ratio(reference['seconds'], seconds):.2f}x" if reference else "-",
                     f"{result['sentence_steps']:,}" if "sentence_steps" in result else "-", f"{result['bleu']:.1f}"])
    what = "SMOKE RECORD, a small model: it proves the pipeline, not a headline; " * work["smoke"] + (
        f"{work['preset']} preset trained {work['train_steps']} steps, output/reference length ratio "
        f"{work['gate']['length_ratio']:.2f} on the validation split" + (f", {work['gate']['at_limit']:.1%} of its outputs "
        "at the length limit" if "at_limit" in work["gate"] else "") + " (allowed by --allow-any-length-ratio)"
        * work["length_ratio_allowed_any"] + f"; {work['stream']}, {work['batch']} a request, EOS left alone, beam "
        "{beam_size}, alpha {alpha}, {length_penalty} penalty, ".format(**work["decoding"]) + f"{work['threads']} "
        f"threads; medians of {len(seconds)} rounds of the whole stream")
    return caption(record, what) + "\n\n" + markdown_table(["contender", "path", "precision", "shortlist",
                                                            "sentences/s", "target tokens/s",
                                                            "vs CT2 int8 like for like", "sentence-steps",
                                                            "BLEU"], rows)


def serve_real_gate_table(records, options):
    """serve.py --real-text: where each selected run's model stood at the length gate (timed or refused), one row a
    record, by preset and steps: the precision it trained and decoded in (a gate without one decoded the model as
    saved, under its training policy), its validation loss and the gate's measures."""
    chosen = sorted(select(records, options, "table:serve-real-gate"),
                    key=lambda record: (record["workload"]["preset"], record["workload"]["train_steps"]))
    rows = []
    for record in chosen:
        work, trained = record["workload"], record["workload"].get("training", {})
        gate, policy = work["gate"], trained.get("precision", "-") or "float32"
        decoded = gate.get("precision") or {"mixed_bfloat16": "bfloat16", "float32": "float32"}.get(policy, "-")
        rows.append([work["preset"], f"{work['train_steps']:,}", policy, decoded,
                     f"{trained['val_loss']:.2f}" if "val_loss" in trained else "-", f"{gate['length_ratio']:.3f}",
                     f"{gate['at_limit']:.1%}" if "at_limit" in gate else "-", f"{gate['bleu']:.1f}",
                     "refused" if record.get("refused") else "timed"])
    text = "; ".join(f"`{command_text(r)}`, commit {r.get('commit') or 'unknown'}, {r.get('time')}" for r in chosen)
    header = ["preset", "steps", "trained in", "decoded in", "validation loss", "length ratio", "at the length limit",
              "BLEU", "gate"]
    return (f"{text}, {machine_text(chosen[0])} (the validation split, {chosen[0]['workload']['gate']['sentences']} "
            "sentences, translated as the run's config says; the gate times a model with a length ratio within "
            "0.8-1.2 and at most 2% of its outputs at the length limit):\n\n" + markdown_table(header, rows))


def serve_profile_parts(record):
    """serve_profile.py (it imports TensorFlow, so its table is built here): each precision and variant's
    step against its products alone."""
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
    return what, ["precision", "variant", "model step", "products alone", "rest"], rows, ["---"] * 2 + ["---:"] * 3


def serve_kernels_parts(record):
    """serve_profile.py --kernels: each product kernel's time per product at each shape, against float32's
    (and, in an --onednn-verbose record, oneDNN's own time and its weight reorders per product)."""
    shapes = list(record["us_per_product"])
    verbose = bool(record.get("onednn_exec_us_per_product"))
    header, rows = ["kernel"], []
    for shape in shapes:
        header += [f"{shape} ms", f"{shape} vs float32"]
        header += [f"{shape} oneDNN ms", f"{shape} reorders"] if verbose else []
    for name in record["us_per_product"][shapes[0]]:
        row = [name]
        for shape in shapes:
            times = record["us_per_product"][shape]
            row += [f"{times[name] / 1000:.2f}", f"{times['float32'] / times[name]:.2f}x"]
            if verbose:
                onednn = record["onednn_exec_us_per_product"][shape].get(name)
                reorders = record["onednn_reorders_per_product"][shape].get(name)
                row += ["-" if not onednn else f"{onednn / 1000:.2f}", "-" if not onednn else f"{reorders:g}"]
        rows.append(row)
    what = (f"milliseconds per product, best of {record['calls']} calls of {record['products_per_call']} products; "
            "rows x inputs by inputs x outputs")
    return what, header, rows, ["---"] + ["---:"] * (len(header) - 1)


serve_profile_table = record_table("serve-profile", serve_profile_parts)
serve_kernels_table = record_table("serve-kernels", serve_kernels_parts)
serve_mix_table = record_table("serve-mix", "serve_mix")
