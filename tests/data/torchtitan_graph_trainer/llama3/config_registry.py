# Copyright (c) Meta Platforms, Inc. and affiliates.
# All rights reserved.
#
# This source code is licensed under the BSD-style license found in the
# LICENSE file in the root directory of this source tree.

from functools import partial

from torchtitan.components.data import ConcatThenSplitPackingConfig, GrainDataLoader
from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.components.quantization import MXFP8LinearConverter
from torchtitan.experiments.graph_trainer.configs import (
    GraphTrainerCompileConfig,
    to_graph_trainer_config,
)
from torchtitan.experiments.graph_trainer.trainer import GraphTrainer
from torchtitan.hf_datasets.text_datasets import DATASETS
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import model_registry as llama3_model_registry
from torchtitan.models.llama3.config_registry import (
    llama3_405b,
    llama3_70b,
    llama3_8b,
    llama3_debugmodel,
    llama3_debugmodel_dist_gemm,
)

from . import model_registry


def graph_trainer_llama3_debugmodel() -> GraphTrainer.Config:
    config = to_graph_trainer_config(llama3_debugmodel(), model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_debugmodel_dist_gemm() -> GraphTrainer.Config:
    """Debug model with the attention and FFN TP collectives folded into the GEMMs.

    The point of running dist-GEMM here rather than only under the eager trainer:
    GraphTrainer traces the whole model, so this is what proves the fused autograd
    Functions survive tracing. Needs tensor_parallel_degree > 1 and CUDA; the base
    config pins spmd_backend to spmd_types.
    """
    config = to_graph_trainer_config(
        llama3_debugmodel_dist_gemm(),
        partial(model_registry, tp_gemm_backend="dist_gemm"),
    )
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_debugmodel_sdpa() -> GraphTrainer.Config:
    """Debug model on the test-only SDPA backend.

    Used by graph machinery tests (precompile artifact serialization, context
    parallel) that can't run on the default FlexAttention backend: its BlockMask
    is unpicklable (mask_mod code objects) and is not a tensor. SDPA exercises
    the same machinery without those obstacles. See
    ``build_decoder_config_for_backend``.
    """
    base = llama3_debugmodel()
    base.parallelism.context_parallel_load_balancer = "headtail"
    base.model_spec = model_registry("debugmodel", attn_backend="sdpa")
    config = to_graph_trainer_config(base, model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_debugmodel_sdpa_cross_entropy_loss() -> GraphTrainer.Config:
    """SDPA debug model with standard cross-entropy loss."""
    config = graph_trainer_llama3_debugmodel_sdpa()
    assert config.model_spec is not None
    config.loss = CrossEntropyLoss.Config(
        global_vocab_size=decoder_vocab_size(config.model_spec),
    )
    return config


def graph_trainer_llama3_debugmodel_sdpa_eager() -> GraphTrainer.Config:
    """SDPA debug model run eagerly (no graph tracing).

    Serves as the eager reference for the AutoParallel SDPA loss-compare test:
    with ``mode=None`` GraphTrainer.forward_backward_step delegates to the core
    (eager) Trainer path, so this is a plain eager FSDP+TP run of the same SDPA
    model the AutoParallel test traces. The default FlexAttention backend can't
    fill this role — flex + AutoParallel is unsupported (BlockMask flattening).
    """
    config = graph_trainer_llama3_debugmodel_sdpa()
    config.compile = GraphTrainerCompileConfig(enable=False, mode=None)
    return config


def graph_trainer_llama3_8b() -> GraphTrainer.Config:
    config = to_graph_trainer_config(llama3_8b(), model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_8b_c4_test() -> GraphTrainer.Config:
    config = graph_trainer_llama3_8b()
    config.dataloader = GrainDataLoader.Config(
        dataset=ConcatThenSplitPackingConfig(dataset=DATASETS["c4_test"]),
    )
    return config


def graph_trainer_llama3_8b_mxfp8() -> GraphTrainer.Config:
    base = llama3_8b()
    # Swap dense Linear layers for MXFP8Linear before wrapping in the
    # graph_trainer config. graph_trainer always compiles the model, so the
    # MXFP8 converter's compile requirement is satisfied.
    base.model_spec = llama3_model_registry(
        "8B",
        converters=[MXFP8LinearConverter.Config(model_compile_enabled=True)],
    )
    config = to_graph_trainer_config(base, model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_70b() -> GraphTrainer.Config:
    config = to_graph_trainer_config(llama3_70b(), model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config


def graph_trainer_llama3_405b() -> GraphTrainer.Config:
    config = to_graph_trainer_config(llama3_405b(), model_registry)
    config.compile = GraphTrainerCompileConfig(enable=True)
    return config
