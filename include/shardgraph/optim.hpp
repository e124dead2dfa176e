#pragma once
// The optimizer math of training: AdamW (f32/f64, and f32 master weights with a bf16 copy), the
// warmup-cosine learning-rate schedule, global-norm gradient clipping under sharding, and dynamic loss
// scaling for f16. Standard library only: the reference that every backend's fused kernels match.
#include "shardgraph/optim/adamw.hpp"
#include "shardgraph/optim/grad_clip.hpp"
#include "shardgraph/optim/loss_scaler.hpp"
#include "shardgraph/optim/lr_schedule.hpp"
