"""report"""

# The plan document's schema: written by document, read by plan_doc (one number, so they cannot drift apart; here
# so that writing a plan does not import the reader). docs/plan-schema.md says when it changes: 2 added each plan's
# band and ranking, 3 each plan's `goodput` and `placement`, each layout's `rank_order` and the cluster's
# `reliability` and `storage` sections, 4 the training's `moe_force_balance`, 5 its `moe_router_fusion`, 6 its
# `attention_kernel`, 7 its `cuda_graph_modules`, 8 the value `fp8` of `attention_kernel` (--fp8-attention), 9 each
# plan's breakdown term `nic_comm_s` (planner.cost.links; older documents read it as 0), 10 each layout's
# `pipeline_layout` and the training's `pipeline_layout` (a run's own stage split; older documents: the planner's
# split, which they priced) and `optimizer` (older documents: adam). The reader
# takes every version listed in READABLE_SCHEMA_VERSIONS (an older
# document lacks the newer fields, which take their defaults: a missing rank_order reads as the default order,
# Layout.from_dict).
SCHEMA_VERSION = 10
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
