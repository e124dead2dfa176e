#pragma once
// An operation graph of cuDNN's backend API (cudnn_graph.h), built op by op and run by one
// execution plan: the small part of the API that cuDNN's fused attention needs.
//
//   cudnn_graph g(handle, "attention forward");
//   auto q = g.tensor(1, {b, h, s, d}, strides, CUDNN_DATA_BFLOAT16);        // memory, bound by uid
//   auto x = g.intermediate({b, h, s, s}, strides, CUDNN_DATA_FLOAT);        // lives in the fused kernel
//   g.matmul(q, k_transposed, x); g.pointwise(CUDNN_POINTWISE_MUL, x, scale, scaled); ...
//   g.finalize();          // the operation graph, then the first engine whose plan finalizes
//   g.run(stream, {{1, q_data}, ...}, workspace);
//
// Every failed call throws shardgraph::error naming the call and the graph, with cuDNN's own
// explanation (cudnnGetLastErrorString). The graph owns all its descriptors.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace shardgraph::cuda {

namespace detail {

inline void check_cudnn(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof last);
  fail(detail::text("cudnn: ", what),
       detail::text(cudnnGetErrorString(status), last[0] != 0 ? ": " : "", last),
       "Check that the cuDNN library at run time is version 9.6 or newer and matches the GPU; "
       "SHARDGRAPH_CUDA_ATTENTION=flash uses shardgraph's own attention kernels instead");
}

// One backend descriptor, destroyed with its owner.
class cudnn_descriptor {
 public:
  cudnn_descriptor() = default;
  explicit cudnn_descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &value_), what_ + " (cudnnBackendCreateDescriptor)");
  }
  cudnn_descriptor(cudnn_descriptor&& o) noexcept
      : value_(std::exchange(o.value_, nullptr)), what_(std::move(o.what_)) {}
  cudnn_descriptor& operator=(cudnn_descriptor&& o) noexcept {
    std::swap(value_, o.value_);
    std::swap(what_, o.what_);
    return *this;
  }
  cudnn_descriptor(const cudnn_descriptor&) = delete;
  cudnn_descriptor& operator=(const cudnn_descriptor&) = delete;
  ~cudnn_descriptor() {
    if (value_ != nullptr) static_cast<void>(cudnnBackendDestroyDescriptor(value_));
  }

  cudnnBackendDescriptor_t get() const { return value_; }
  template <class V>
  cudnn_descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V* values,
                        std::int64_t count = 1) {
    check_cudnn(cudnnBackendSetAttribute(value_, name, type, count, values),
                detail::text(what_, " (cudnnBackendSetAttribute ", static_cast<int>(name), ")"));
    return *this;
  }
  cudnn_descriptor& set(cudnnBackendAttributeName_t name, const cudnn_descriptor& d) {
    const cudnnBackendDescriptor_t v = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v);
  }
  cudnn_descriptor& finalize() {
    check_cudnn(cudnnBackendFinalize(value_), what_ + " (cudnnBackendFinalize)");
    return *this;
  }

 private:
  cudnnBackendDescriptor_t value_ = nullptr;
  std::string what_;
};

}  // namespace detail

class cudnn_graph {
 public:
  struct tensor_ref {
    const detail::cudnn_descriptor* descriptor = nullptr;
    std::vector<std::int64_t> dims, strides;
  };
  // The data of one of the graph's memory tensors, by uid.
  struct binding {
    std::int64_t uid;
    void* data;
  };

  cudnn_graph(cudnnHandle_t handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  cudnn_graph(const cudnn_graph&) = delete;
  cudnn_graph& operator=(const cudnn_graph&) = delete;

  // A tensor in memory, bound at run() by its uid (> 0).
  tensor_ref tensor(std::int64_t uid, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                    cudnnDataType_t type) {
    uids_.push_back(uid);
    return make_tensor(uid, std::move(dims), std::move(strides), type, false, false);
  }
  // A float scalar passed by value at run() (the attention's scale, a mask's fill value).
  tensor_ref scalar(std::int64_t uid, float value) {
    scalars_.push_back({uid, value});
    return make_tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true);
  }
  // A value inside the fused kernels, never in memory.
  tensor_ref intermediate(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                          cudnnDataType_t type) {
    return make_tensor(next_virtual_uid_++, std::move(dims), std::move(strides), type, true, false);
  }
  // An intermediate of x's shape.
  tensor_ref like(const tensor_ref& x, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return intermediate(x.dims, x.strides, type);
  }

  // y = mode(x[, b[, t]]), in `precision`; axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, const tensor_ref& x, const tensor_ref* b, const tensor_ref* t,
                 const tensor_ref& y, cudnnDataType_t precision = CUDNN_DATA_FLOAT, std::int64_t axis = -1) {
    auto& d = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    d.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) d.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
    d.finalize();
    auto& op = operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, d)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x.descriptor)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y.descriptor);
    if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b->descriptor);
    if (t != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t->descriptor);
    op.finalize();
  }
  // An f32 intermediate of x's shape = mode(x[, b]).
  tensor_ref pointwise(cudnnPointwiseMode_t mode, const tensor_ref& x, const tensor_ref* b = nullptr) {
    tensor_ref y = like(x);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }
  // y = the max or the sum of x over the dims where y has extent 1.
  void reduction(cudnnReduceTensorOp_t mode, const tensor_ref& x, const tensor_ref& y) {
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    auto& d = keep(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    d.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute)
        .finalize();
    operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation")
        .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x.descriptor)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y.descriptor)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, d)
        .finalize();
  }
  // c = a b over the last two dims (batched over the others), in f32.
  void matmul(const tensor_ref& a, const tensor_ref& b, const tensor_ref& c) {
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    auto& d = keep(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    d.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute).finalize();
    operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation")
        .set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a.descriptor)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b.descriptor)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c.descriptor)
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, d)
        .finalize();
  }
  // y = x seen with y's dims and strides (a transpose, a change of dtype).
  void reshape(const tensor_ref& x, const tensor_ref& y) {
    operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation")
        .set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x.descriptor)
        .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y.descriptor)
        .finalize();
  }

  // The operation graph, then an execution plan of the first engine configuration that cuDNN's
  // heuristics offer (mode A, then the fallback list) and that finalizes: first among the engines
  // whose results do not depend on scheduling (no atomics), then among all. False when none does.
  bool finalize() {
    build_graph();
    return choose_plan(true) || choose_plan(false);
  }
  // Whether the chosen engine's results are the same bits on every run.
  bool deterministic() const { return deterministic_; }

  std::size_t workspace_bytes() const { return static_cast<std::size_t>(workspace_bytes_); }

  // Runs the plan on `stream`: every memory tensor bound, `workspace` of workspace_bytes().
  void run(cudaStream_t stream, std::initializer_list<binding> bindings, void* workspace) {
    std::vector<std::int64_t> uids;
    std::vector<void*> pointers;
    for (const binding& b : bindings) {
      uids.push_back(b.uid);
      pointers.push_back(b.data);
    }
    for (auto& s : scalars_) {
      uids.push_back(s.uid);
      pointers.push_back(&s.value);
    }
    if (uids.size() != uids_.size() + scalars_.size())
      fail(detail::text("cudnn: ", name_),
           detail::text("run() binds ", bindings.size(), " tensors, the graph has ", uids_.size()),
           "this is a bug in shardgraph's cuDNN attention; please report it");
    detail::cudnn_descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, name_ + ": variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
             static_cast<std::int64_t>(uids.size()))
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
             static_cast<std::int64_t>(pointers.size()))
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
        .finalize();
    detail::check_cudnn(cudnnSetStream(handle_, stream), name_ + " (cudnnSetStream)");
    detail::check_cudnn(cudnnBackendExecute(handle_, plan_.get(), pack.get()),
                        name_ + " (cudnnBackendExecute)");
  }

 private:
  void build_graph() {
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const auto& op : operations_) ops.push_back(op.get());
    graph_ = detail::cudnn_descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, name_ + ": operation graph");
    graph_
        .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
             static_cast<std::int64_t>(ops.size()))
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle_)
        .finalize();
  }

  // Whether the engine of `config` carries cuDNN's "non-deterministic" numerical note.
  static bool nondeterministic(const detail::cudnn_descriptor& config) {
    detail::cudnn_descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    cudnnBackendDescriptor_t e = engine.get();
    std::int64_t count = 0;
    if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &count, &e) != CUDNN_STATUS_SUCCESS)
      return true;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
      return true;
    for (std::int64_t i = 0; i < count; ++i)
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
    return false;
  }

  bool choose_plan(bool only_deterministic) {
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      detail::cudnn_descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, name_ + ": engine heuristics");
      heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph_)
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
      if (cudnnBackendFinalize(heuristics.get()) != CUDNN_STATUS_SUCCESS) continue;
      std::int64_t count = 0;
      if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr) != CUDNN_STATUS_SUCCESS)
        continue;
      std::vector<detail::cudnn_descriptor> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (std::int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, name_ + ": engine configuration");
        raw.push_back(configs.back().get());
      }
      if (count == 0 || cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                                 raw.data()) != CUDNN_STATUS_SUCCESS)
        continue;
      for (std::int64_t i = 0; i < count; ++i) {
        const bool exact = !nondeterministic(configs[static_cast<std::size_t>(i)]);
        if (only_deterministic && !exact) continue;
        detail::cudnn_descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, name_ + ": execution plan");
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle_)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<std::size_t>(i)]);
        if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;
        std::int64_t got = 0;
        detail::check_cudnn(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                     CUDNN_TYPE_INT64, 1, &got, &workspace_bytes_),
                            name_ + ": execution plan (workspace size)");
        config_ = std::move(configs[static_cast<std::size_t>(i)]);
        plan_ = std::move(plan);
        deterministic_ = exact;
        return true;
      }
    }
    return false;
  }

  struct scalar_value {
    std::int64_t uid;
    float value;
  };

  tensor_ref make_tensor(std::int64_t uid, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                         cudnnDataType_t type, bool is_virtual, bool by_value) {
    auto& d = keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR, detail::text("tensor ", uid));
    const std::int64_t alignment = 16, rank = static_cast<std::int64_t>(dims.size());
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), rank)
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), rank)
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
    if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value);
    d.finalize();
    return {&d, std::move(dims), std::move(strides)};
  }
  detail::cudnn_descriptor& keep(cudnnBackendDescriptorType_t type, const std::string& what) {
    return descriptors_.emplace_back(type, name_ + ": " + what);
  }
  detail::cudnn_descriptor& operation(cudnnBackendDescriptorType_t type, const std::string& what) {
    return operations_.emplace_back(type, name_ + ": " + what);
  }

  cudnnHandle_t handle_;
  std::string name_;
  std::int64_t next_virtual_uid_ = 1000;
  std::vector<std::int64_t> uids_;
  std::deque<scalar_value> scalars_;  // their addresses go into the variant pack
  // Members are destroyed bottom-up: the plan before the graph, the graph before its operations,
  // the operations before the tensors and descriptors they name.
  std::deque<detail::cudnn_descriptor> descriptors_;
  std::deque<detail::cudnn_descriptor> operations_;
  detail::cudnn_descriptor graph_;
  detail::cudnn_descriptor config_;
  detail::cudnn_descriptor plan_;
  std::int64_t workspace_bytes_ = 0;
  bool deterministic_ = false;
};

}  // namespace shardgraph::cuda
