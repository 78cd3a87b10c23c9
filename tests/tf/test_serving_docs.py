"""docs/serving.md's TF Serving deployment: the command lines, config files and REST request bodies.

No model server can be installed here (not on PyPI, no docker image offline), so what can be checked is:
every flag of the documented `tensorflow_model_server` and `docker run` command lines is one TF Serving
2.20.0 defines; the model config file parses as the server's `ModelServerConfig` (the proto from
tensorflow-serving-api) and the batching block is the file the export writes, parsed as the server's
`BatchingParameters`; the REST request bodies, turned into signature calls as TF Serving's REST layer does,
run against an export in process and answer with the documented outputs.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from served_model import ROOT, XLA_CACHE_FLAG, batching_parameters_class, build_model, train_tokenizer

from keras_transformer.export import batching as batching_lib
from keras_transformer.export import export_saved_model

DOC = (ROOT / "docs" / "serving.md").read_text()

# The flags `tensorflow_model_server` 2.20.0 defines: the tensorflow::Flag names of
# tensorflow_serving/model_servers/main.cc at tag 2.20.0 (commit bc7e9d2b9a419294c4526e293c2df8727b0d3116;
# e.g. "xla_cpu_compilation_enabled" at line 289, "tensorflow_intra_op_parallelism" at 205).
SERVER_FLAGS = {
    "allow_version_labels_for_unavailable_models", "batching_parameters_file", "enable_batching",
    "enable_grpc_healthcheck_service", "enable_model_warmup", "enable_per_model_batching_parameters",
    "enable_profiler", "enable_serialization_as_tensor_content", "enable_signature_method_name_check",
    "file_system_poll_wait_seconds", "flush_filesystem_caches", "grpc_channel_arguments", "grpc_max_threads",
    "grpc_socket_path", "load_retry_interval_micros", "max_num_load_retries", "mixed_precision",
    "model_base_path", "model_config_file", "model_config_file_poll_wait_seconds", "model_name",
    "monitoring_config_file", "num_load_threads", "num_request_iterations_for_warmup",
    "num_tflite_interpreters_per_pool", "num_tflite_pools", "num_unload_threads", "per_process_gpu_memory_fraction",
    "platform_config_file", "port", "prefer_tflite_model", "remove_unused_fields_from_bundle_metagraph",
    "rest_api_enable_cors_support", "rest_api_num_threads", "rest_api_port", "rest_api_timeout_in_ms",
    "saved_model_tags", "skip_initialize_tpu", "ssl_config_file", "tensorflow_inter_op_parallelism",
    "tensorflow_intra_op_parallelism", "tensorflow_session_config_file", "tensorflow_session_parallelism",
    "thread_pool_factory_config_file", "use_alts_credentials", "version", "xla_cpu_compilation_enabled",
    "xla_gpu_compilation_enabled",
}


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def server_commands():
    """The documented server command lines, continuation lines joined: (command, its server flags)."""
    commands = []
    for block in blocks("bash"):
        for command in block.replace("\\\n", " ").splitlines():
            server = re.sub(r"^([A-Z_]+=\S+ )+", "", command)  # started with variables in its environment
            if server.startswith("tensorflow_model_server"):
                commands.append((command, re.findall(r"--([a-z_0-9]+)", server)))
            elif command.startswith("docker run") and "tensorflow/serving" in command:
                # The server's flags are those after the image's name (docker's own come before it).
                commands.append((command, re.findall(r"--([a-z_0-9]+)", command.split("tensorflow/serving")[1])))
    return commands


def test_command_lines_use_flags_the_server_defines():
    commands = server_commands()
    assert len(commands) >= 5  # plain, XLA, batching, model config, docker
    used = set()
    for command, flags in commands:
        unknown = set(flags) - SERVER_FLAGS
        assert not unknown, (command, unknown)
        used.update(flags)
        # A boolean flag is written =true (a bare one would also be accepted; the docs are explicit).
        assert "--xla_cpu_compilation_enabled " not in command + " " and "--enable_batching " not in command + " "
    assert {"xla_cpu_compilation_enabled", "enable_batching", "batching_parameters_file", "model_config_file",
            "tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism"} <= used
    # The plain variant's command is stock: no experimental flag.
    assert any("xla_cpu_compilation_enabled" not in flags and "model_base_path" in flags for _, flags in commands)


def test_the_xla_cache_variable_is_the_one_the_restart_test_sets():
    """tests/tf/test_warmup.py restarts a served export on TF's persistent XLA cache set through this
    variable; the documented docker line passes the same, before the image (docker's -e, not a server flag)."""
    docker = [command for command, _ in server_commands() if f"TF_XLA_FLAGS={XLA_CACHE_FLAG}=" in command]
    assert len(docker) == 1 and docker[0].startswith("docker run")
    assert docker[0].index("TF_XLA_FLAGS") < docker[0].index("tensorflow/serving")
    assert "--xla_cpu_compilation_enabled=true" in docker[0]


def test_the_onednn_variable_is_the_one_exports_advise_and_reaches_a_plain_server():
    """On a CPU without AVX-512 the plain variant wants TensorFlow's oneDNN kernels on
    (tests/tf/test_cpu_notes.py checks that the variable switches them): the docs set it before a stock
    server command and in docker's environment (-e, before the image), never as a server flag."""
    from keras_transformer.export.cpu_notes import ONEDNN_VARIABLE

    setting = f"{ONEDNN_VARIABLE}=1"
    lines = [line for block in blocks("bash") for line in block.replace("\\\n", " ").splitlines() if setting in line]
    assert any(line.startswith(f"{setting} tensorflow_model_server") for line in lines), lines
    docker = [line for line in lines if line.startswith("docker run")]
    assert docker and all(line.index(setting) < line.index("tensorflow/serving") for line in docker)
    assert all("xla_cpu_compilation_enabled" not in line for line in lines)  # the plain variant's commands
    # Both are parsed as server commands, their flags checked with the others'.
    assert any(command.startswith(f"{setting} tensorflow_model_server") and "model_base_path" in flags
               for command, flags in server_commands())
    assert len([command for command, _ in server_commands() if setting in command]) == len(docker) + 1


def test_model_config_parses_as_the_servers_proto():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    (block,) = [block for block in blocks("text") if "model_config_list" in block]
    config = text_format.Parse(block, model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert model.name == "translator" and model.model_platform == "tensorflow"
    assert list(model.model_version_policy.specific.versions) == [1, 2]
    # The alternatives the text names parse too.
    for policy in ("all {}", "latest { num_versions: 2 }"):
        text_format.Parse(f"model_version_policy {{ {policy} }}", model_server_config_pb2.ModelConfig())


def test_batching_block_is_the_exports_file():
    from google.protobuf import text_format

    (block,) = [block for block in blocks("text") if "max_batch_size" in block]
    written = batching_lib.batching_parameters_text(batching_lib.batching_parameters(jit_compile=True,
                                                                                     warmup_rows=64))
    assert block == "".join(line + "\n" for line in written.splitlines() if not line.startswith("#"))
    parameters = text_format.Parse(block, batching_parameters_class()())
    assert list(parameters.allowed_batch_sizes) == [8, 16, 32, 64] and parameters.pad_variable_length_inputs


@pytest.fixture(scope="module")
def signatures(tmp_path_factory):
    tokenizer = train_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    export_dir = export_saved_model(build_model(tokenizer.vocabulary_size), tokenizer,
                                    tmp_path_factory.mktemp("models"), beam_size=1, max_extra_length=4,
                                    max_input_length=16, check_ops=False)
    return tf.saved_model.load(export_dir).signatures


def rest_bodies():
    """The documented REST request bodies (JSON objects naming a signature)."""
    found = re.findall(r"-d '(\{.*?\})'", DOC) + re.findall(r"`(\{\"signature_name\".*?\})`", DOC)
    return [json.loads(body) for body in found]


def test_rest_request_bodies_run_against_the_export(signatures):
    """Each body as TF Serving's REST layer maps it (api_rest.md): the row format's "instances" are the
    one input's rows, the columnar "inputs" name the inputs; the answer has one row per instance."""
    bodies = rest_bodies()
    assert {body["signature_name"] for body in bodies} == {"serving_default", "translate_ids",
                                                           "translate_ids_with_lengths"}
    for body in bodies:
        signature = signatures[body["signature_name"]]
        names = signature.structured_input_signature[1]
        if "instances" in body:
            (name,) = names
            inputs = {name: body["instances"]}
        else:
            inputs = body["inputs"]
        assert set(inputs) == set(names), body
        outputs = signature(**{name: tf.constant(value, names[name].dtype) for name, value in inputs.items()})
        rows = len(next(iter(inputs.values())))
        assert all(value.shape[0] == rows for value in outputs.values())
        if body["signature_name"] == "serving_default":
            assert set(outputs) == {"translations", "scores", "truncated"}  # the documented answer
    # The ids example ends its row with EOS; the lengths one reads the same ids: the same translation.
    by_name = {body["signature_name"]: body for body in bodies}
    ended = signatures["translate_ids"](source_ids=tf.constant(by_name["translate_ids"]["inputs"]["source_ids"]))
    counted = signatures["translate_ids_with_lengths"](**{
        name: tf.constant(value) for name, value in by_name["translate_ids_with_lengths"]["inputs"].items()})
    np.testing.assert_array_equal(ended["ids"].numpy(), counted["ids"].numpy())
