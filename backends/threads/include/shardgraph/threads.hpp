#pragma once
// The threads backend: N ranks as threads of one process (the embedded default communicator).
#include <shardgraph/comm/collectives.hpp>
#include <shardgraph/threads/communicator.hpp>
#include <shardgraph/threads/element_type.hpp>
#include <shardgraph/threads/group.hpp>
#include <shardgraph/threads/message.hpp>
#include <shardgraph/threads/slot.hpp>
#include <shardgraph/threads/text.hpp>
#include <shardgraph/threads/world.hpp>
#include <shardgraph/threads/world_state.hpp>
