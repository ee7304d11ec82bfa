// kernelbridge: reading and writing the launch-contract JSON (schema v1, docs/architecture.md).
//
// Why strict: a typo in a contract (unknown key, bad dtype, relation naming no argument) must fail
// when the contract is loaded, naming the field, not silently weaken the checks at every launch.
#pragma once

#include <string>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/detail/json.hpp"
#include "kernelbridge/detail/relations.hpp"

namespace kb {

inline int find_arg(const LaunchContract& c, const std::string& name) {
  for (size_t k = 0; k < c.args.size(); ++k)
    if (c.args[k].name == name) return static_cast<int>(k);
  return -1;
}

// Blocks per thread-block cluster: 8 is portable across cluster-capable GPUs; sm_90 allows up to 16
// for a function that opts in (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
constexpr int kMaxClusterPortable = 8;
constexpr int kMaxClusterNonportable = 16;

namespace detail {

inline const char* layout_name(Layout l) { return l == Layout::c_contig ? "C" : l == Layout::f_contig ? "F" : "any"; }
inline const char* access_name(Access a) {
  return a == Access::write ? "write" : a == Access::readwrite ? "readwrite" : a == Access::atomic ? "atomic" : "read";
}
inline const char* abi_name(Abi a) { return a == Abi::view ? "view" : "pointer"; }

inline std::string dtype_choices() {
  std::string s;
  for (int i = 1; i <= static_cast<int>(DType::any); ++i) s += std::string(i > 1 ? ", " : "") + dtype_name(static_cast<DType>(i));
  return s;
}
inline DType dtype_from_short_name(const std::string& s) {
  for (int i = 1; i <= static_cast<int>(DType::any); ++i)
    if (s == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  return DType::invalid;
}
inline bool scalar_dtype_ok(DType t) {
  return t == DType::bool_ || dtype_is_signed_int(t) || dtype_is_unsigned_int(t) || t == DType::f16 ||
         t == DType::bf16 || t == DType::f32 || t == DType::f64;
}
inline bool is_identifier(const std::string& s) {
  if (s.empty() || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  return true;
}

class ContractReader {
 public:
  explicit ContractReader(LaunchContract& c) : c_(c) {}
  Error error;

  bool read(const json::Value& root) {
    if (root.type != json::Value::Type::object) return fail("", std::string("expected an object, got ") + json::type_name(root.type));
    if (const json::Value* k = root.get("kernel")) {
      if (k->type != json::Value::Type::string || k->s.empty()) return fail("kernel", "expected a non-empty string");
      c_.kernel = k->s;
    } else {
      return fail("kernel", "missing (required)");
    }
    static const char* keys[] = {"version", "kernel", "domain", "strict_domain", "block", "dynamic_smem", "min_cc", "args",
                                 "requires", "inplace", "grid_from", "fault_sites", "tensor_maps", "pdl",
                                 "cooperative", "cluster", "cluster_nonportable"};
    if (!known_keys(root, "", keys, sizeof keys / sizeof *keys)) return false;
    int64_t v;
    if (const json::Value* x = root.get("version")) {
      if (!integer(*x, "version", 1, 1, v)) return false;
    }
    if (const json::Value* x = root.get("domain")) {
      if (!integer(*x, "domain", 1, 3, v)) return false;
      c_.domain = static_cast<int>(v);
    }
    if (const json::Value* x = root.get("strict_domain")) {
      if (x->type != json::Value::Type::boolean) return fail("strict_domain", std::string("expected true or false, got ") + json::type_name(x->type));
      c_.strict_domain = x->b;
    }
    if (const json::Value* x = root.get("min_cc")) {
      if (!integer(*x, "min_cc", 0, 1000, v)) return false;
      c_.min_cc = static_cast<int>(v);
    }
    if (const json::Value* x = root.get("block")) { if (!block(*x)) return false; }
    if (const json::Value* x = root.get("dynamic_smem")) { if (!smem(*x)) return false; }
    const json::Value* a = root.get("args");
    if (!a) return fail("args", "missing (required)");
    if (!args(*a)) return false;
    if (const json::Value* x = root.get("requires")) { if (!relations(*x)) return false; }
    if (const json::Value* x = root.get("inplace")) { if (!inplace(*x)) return false; }
    if (const json::Value* x = root.get("grid_from")) { if (!grid_from(*x)) return false; }
    if (const json::Value* x = root.get("fault_sites")) { if (!fault_sites(*x)) return false; }
    if (const json::Value* x = root.get("tensor_maps")) { if (!tensor_maps(*x)) return false; }
    return launch_features(root);
  }

  bool fail(const std::string& field, const std::string& what, int arg = -1) {
    error.code = ErrorCode::contract_definition;
    error.arg = arg;
    if (arg >= 0 && arg < static_cast<int>(c_.args.size())) error.arg_name = c_.args[arg].name;
    error.message = (c_.kernel.empty() ? std::string("contract") : c_.kernel) + ": invalid contract: " +
                    (field.empty() ? "" : field + ": ") + what;
    return false;
  }

 private:
  LaunchContract& c_;

  bool known_keys(const json::Value& obj, const std::string& where, const char* const* keys, size_t n, int arg = -1) {
    for (const auto& m : obj.members) {
      bool ok = false;
      for (size_t k = 0; k < n && !ok; ++k) ok = m.first == keys[k];
      if (!ok) {
        std::string allowed;
        for (size_t k = 0; k < n; ++k) allowed += std::string(k ? ", " : "") + keys[k];
        return fail(where.empty() ? m.first : where + "." + m.first, "unknown key (allowed: " + allowed + ")", arg);
      }
    }
    return true;
  }
  bool integer(const json::Value& x, const std::string& field, int64_t lo, int64_t hi, int64_t& out, int arg = -1) {
    if (x.type != json::Value::Type::number || !x.is_int)
      return fail(field, std::string("expected an integer, got ") +
                             (x.type == json::Value::Type::number ? "a non-integer number" : json::type_name(x.type)), arg);
    if (x.i < lo || x.i > hi)
      return fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             std::to_string(x.i), arg);
    out = x.i;
    return true;
  }
  bool string(const json::Value& x, const std::string& field, std::string& out, int arg = -1) {
    if (x.type != json::Value::Type::string)
      return fail(field, std::string("expected a string, got ") + json::type_name(x.type), arg);
    out = x.s;
    return true;
  }
  bool object(const json::Value& x, const std::string& field) {
    if (x.type == json::Value::Type::object) return true;
    return fail(field, std::string("expected an object, got ") + json::type_name(x.type));
  }
  bool list(const json::Value& x, const std::string& field, size_t lo, size_t hi) {
    if (x.type != json::Value::Type::array) return fail(field, std::string("expected an array, got ") + json::type_name(x.type));
    if (x.items.size() < lo || x.items.size() > hi)
      return fail(field, "expected " + std::to_string(lo) + (lo == hi ? "" : " to " + std::to_string(hi)) +
                             " elements, got " + std::to_string(x.items.size()));
    return true;
  }
  bool dims(const json::Value& x, const std::string& field, int out[3], int64_t hi) {
    if (!list(x, field, 1, 3)) return false;
    for (int d = 0; d < 3; ++d) out[d] = 1;
    for (size_t d = 0; d < x.items.size(); ++d) {
      int64_t v;
      if (!integer(x.items[d], field + "[" + std::to_string(d) + "]", 1, hi, v)) return false;
      out[d] = static_cast<int>(v);
    }
    return true;
  }
  bool block(const json::Value& x) {
    if (!object(x, "block")) return false;
    if (x.members.size() != 1) return fail("block", "expected exactly one of \"exact\" or \"max_threads\"");
    const std::string& key = x.members[0].first;
    const json::Value& v = x.members[0].second;
    if (key == "exact") {
      if (!dims(v, "block.exact", c_.block, 1024)) return false;
      int64_t total = int64_t{c_.block[0]} * c_.block[1] * c_.block[2];
      if (total > 1024)
        return fail("block.exact", "expected at most 1024 threads per block, got " + std::to_string(total));
      c_.block_exact = true;
      return true;
    }
    if (key == "max_threads") {
      int64_t n;
      if (!integer(v, "block.max_threads", 1, 1024, n)) return false;
      c_.max_threads = static_cast<int>(n);
      return true;
    }
    return fail("block." + key, "unknown key (allowed: exact, max_threads)");
  }
  bool smem(const json::Value& x) {
    if (!object(x, "dynamic_smem")) return false;
    if (x.members.size() != 1) return fail("dynamic_smem", "expected exactly one of \"exact\" or \"max\"");
    const std::string& key = x.members[0].first;
    if (key != "exact" && key != "max") return fail("dynamic_smem." + key, "unknown key (allowed: exact, max)");
    c_.smem_exact = key == "exact";
    return integer(x.members[0].second, "dynamic_smem." + key, 0, INT64_C(1) << 40, c_.smem);
  }
  template <class E>
  bool choice(const json::Value& x, const std::string& field, const char* const* names, const E* values, size_t n,
              E& out, int arg) {
    std::string s;
    if (!string(x, field, s, arg)) return false;
    std::string allowed;
    for (size_t k = 0; k < n; ++k) {
      if (s == names[k]) { out = values[k]; return true; }
      allowed += std::string(k ? ", " : "") + names[k];
    }
    return fail(field, "unknown value '" + s + "' (expected one of " + allowed + ")", arg);
  }
  bool arg(const json::Value& x, int pos) {
    std::string field = "args[" + std::to_string(pos) + "]";
    if (!object(x, field)) return false;
    ArgSpec sp;
    const json::Value* name = x.get("name");
    if (!name) return fail(field + ".name", "missing (required)");
    if (!string(*name, field + ".name", sp.name)) return false;
    if (!is_identifier(sp.name)) return fail(field + ".name", "expected an identifier, got '" + sp.name + "'");
    if (find_arg(c_, sp.name) >= 0) return fail(field + ".name", "duplicate argument name '" + sp.name + "'");
    c_.args.push_back(sp);
    ArgSpec& a = c_.args.back();
    field += " ('" + a.name + "')";
    static const char* kinds[] = {"array", "scalar"};
    static const ArgKind kind_v[] = {ArgKind::array, ArgKind::scalar};
    const json::Value* kind = x.get("kind");
    if (!kind) return fail(field + ".kind", "missing (required)", pos);
    if (!choice(*kind, field + ".kind", kinds, kind_v, 2, a.kind, pos)) return false;
    static const char* array_keys[] = {"name", "kind", "dtype", "ndim", "layout", "align", "access", "abi", "optional"};
    if (!known_keys(x, field, array_keys, a.kind == ArgKind::array ? 9 : 3, pos)) return false;
    const json::Value* dt = x.get("dtype");
    if (!dt) return fail(field + ".dtype", "missing (required)", pos);
    std::string dname;
    if (!string(*dt, field + ".dtype", dname, pos)) return false;
    a.dtype = dtype_from_short_name(dname);
    if (a.dtype == DType::invalid)
      return fail(field + ".dtype", "unknown dtype '" + dname + "' (expected one of " + dtype_choices() + ")", pos);
    if (a.kind == ArgKind::scalar) {
      if (!scalar_dtype_ok(a.dtype))
        return fail(field + ".dtype", "a scalar must be bool, an integer, f16, bf16, f32 or f64, got '" + dname + "'", pos);
      return true;
    }
    int64_t v;
    if (const json::Value* n = x.get("ndim")) {
      if (!integer(*n, field + ".ndim", -1, kMaxDims, v, pos)) return false;
      a.ndim = static_cast<int>(v);
    }
    if (const json::Value* n = x.get("align")) {
      if (!integer(*n, field + ".align", 0, 4096, v, pos)) return false;
      if (v & (v - 1)) return fail(field + ".align", "expected 0 or a power of two, got " + std::to_string(v), pos);
      a.align = static_cast<int>(v);
    }
    static const char* layouts[] = {"any", "C", "F"};
    static const Layout layout_v[] = {Layout::any, Layout::c_contig, Layout::f_contig};
    if (const json::Value* n = x.get("layout")) { if (!choice(*n, field + ".layout", layouts, layout_v, 3, a.layout, pos)) return false; }
    static const char* accesses[] = {"read", "write", "readwrite", "atomic"};
    static const Access access_v[] = {Access::read, Access::write, Access::readwrite, Access::atomic};
    if (const json::Value* n = x.get("access")) { if (!choice(*n, field + ".access", accesses, access_v, 4, a.access, pos)) return false; }
    static const char* abis[] = {"pointer", "view"};
    static const Abi abi_v[] = {Abi::pointer, Abi::view};
    if (const json::Value* n = x.get("abi")) { if (!choice(*n, field + ".abi", abis, abi_v, 2, a.abi, pos)) return false; }
    if (const json::Value* n = x.get("optional")) {
      if (n->type != json::Value::Type::boolean)
        return fail(field + ".optional", std::string("expected true or false, got ") + json::type_name(n->type), pos);
      a.optional = n->b;
      if (a.optional) c_.has_optional = true;
    }
    if (a.abi == Abi::view && a.ndim < 0)
      return fail(field + ".abi", "abi 'view' packs ndim extents and strides, so ndim must be fixed (got -1)", pos);
    return true;
  }
  bool args(const json::Value& x) {
    if (!list(x, "args", 0, 256)) return false;
    for (size_t k = 0; k < x.items.size(); ++k)
      if (!arg(x.items[k], static_cast<int>(k))) return false;
    return true;
  }
  bool relations(const json::Value& x) {
    if (!list(x, "requires", 0, 1024)) return false;
    for (size_t k = 0; k < x.items.size(); ++k) {
      std::string field = "requires[" + std::to_string(k) + "]", text, why;
      if (!string(x.items[k], field, text)) return false;
      auto rel = std::make_shared<Relation>();
      RelationParser p(text, c_, *rel);
      if (!p.parse(why)) return fail(field, "'" + text + "': " + why);
      c_.requires_text.push_back(text);
      c_.has_launch_relations |= rel->uses_launch;
      c_.relations.push_back(rel);
    }
    return true;
  }
  int array_name(const json::Value& x, const std::string& field) {
    std::string s;
    if (!string(x, field, s)) return -1;
    int a = find_arg(c_, s);
    if (a < 0) { fail(field, "'" + s + "' is not an argument"); return -1; }
    if (c_.args[a].kind != ArgKind::array) { fail(field, "'" + s + "' is a scalar, expected an array argument", a); return -1; }
    return a;
  }
  bool inplace(const json::Value& x) {
    if (!list(x, "inplace", 0, 1024)) return false;
    for (size_t k = 0; k < x.items.size(); ++k) {
      std::string field = "inplace[" + std::to_string(k) + "]";
      if (!list(x.items[k], field, 2, 2)) return false;
      int a = array_name(x.items[k].items[0], field + "[0]");
      int b = a < 0 ? -1 : array_name(x.items[k].items[1], field + "[1]");
      if (a < 0 || b < 0) return false;
      if (a == b) return fail(field, "a pair needs two different arguments, got '" + c_.args[a].name + "' twice", a);
      c_.inplace.emplace_back(a, b);
    }
    return true;
  }
  bool grid_from(const json::Value& x) {
    if (!object(x, "grid_from")) return false;
    static const char* keys[] = {"arg", "per_thread", "tile", "max_blocks_per_sm"};
    if (!known_keys(x, "grid_from", keys, 4)) return false;
    const json::Value* a = x.get("arg");
    if (!a) return fail("grid_from.arg", "missing (required)");
    int pos = array_name(*a, "grid_from.arg");
    if (pos < 0) return false;
    if (c_.args[pos].optional)
      return fail("grid_from.arg", "'" + c_.args[pos].name + "' is optional (may be None), so no grid can be "
                                   "derived from it; derive the grid from a required array or pass grid=", pos);
    int nd = c_.args[pos].ndim;
    if (nd >= 0 && nd < c_.domain)
      return fail("grid_from.arg", "'" + c_.args[pos].name + "' is declared " + std::to_string(nd) +
                                       "-d, fewer axes than the " + std::to_string(c_.domain) + "-d domain", pos);
    c_.grid_from_arg = pos;
    if (const json::Value* p = x.get("per_thread")) {
      if (!dims(*p, "grid_from.per_thread", c_.per_thread, INT64_C(1) << 30)) return false;
    }
    if (const json::Value* t = x.get("tile")) {
      if (x.get("per_thread")) return fail("grid_from", "give per_thread (threads over elements) or tile "
                                                         "(one block per tile), not both", pos);
      if (c_.domain != 1) return fail("grid_from.tile", "tile grids are 1-D (domain 1)", pos);
      if (!list(*t, "grid_from.tile", 1, kMaxDims)) return false;
      // a shorter list leaves the axes past it whole (one tile each); a longer one names axes the array lacks
      if (nd >= 0 && static_cast<int>(t->items.size()) > nd)
        return fail("grid_from.tile", "'" + c_.args[pos].name + "' is declared " + std::to_string(nd) +
                                          "-d, the tile shape has " + std::to_string(t->items.size()) + " axes", pos);
      for (size_t d = 0; d < t->items.size(); ++d) {
        int64_t v;
        if (!integer(t->items[d], "grid_from.tile[" + std::to_string(d) + "]", 1, INT64_C(1) << 40, v)) return false;
        c_.grid_tile.push_back(v);
      }
    }
    if (const json::Value* m = x.get("max_blocks_per_sm")) {
      if (c_.grid_tile.empty()) return fail("grid_from.max_blocks_per_sm", "only meaningful with a tile grid", pos);
      int64_t v;
      if (!integer(*m, "grid_from.max_blocks_per_sm", 0, 1024, v)) return false;
      c_.max_blocks_per_sm = static_cast<int>(v);
    }
    return true;
  }
  bool flag(const json::Value& root, const char* key, bool& out) {
    const json::Value* x = root.get(key);
    if (!x) return true;
    if (x->type != json::Value::Type::boolean)
      return fail(key, std::string("expected true or false, got ") + json::type_name(x->type));
    out = x->b;
    return true;
  }
  // pdl / cooperative / cluster / cluster_nonportable (docs/architecture.md "Launch features"). The
  // cluster's static limits are checked here; the device's and the compiled function's at each launch.
  bool launch_features(const json::Value& root) {
    if (!flag(root, "pdl", c_.pdl) || !flag(root, "cooperative", c_.cooperative) ||
        !flag(root, "cluster_nonportable", c_.cluster_nonportable))
      return false;
    const json::Value* x = root.get("cluster");
    if (x == nullptr || x->type == json::Value::Type::null) {
      if (c_.cluster_nonportable) return fail("cluster_nonportable", "only meaningful with a cluster");
      return true;
    }
    if (!dims(*x, "cluster", c_.cluster, kMaxClusterNonportable)) return false;
    const int64_t size = int64_t{c_.cluster[0]} * c_.cluster[1] * c_.cluster[2];
    const int64_t most = c_.cluster_nonportable ? kMaxClusterNonportable : kMaxClusterPortable;
    if (size > most)
      return fail("cluster", "expected at most " + std::to_string(most) + " blocks per cluster (" +
                                 (c_.cluster_nonportable ? "the non-portable limit" :
                                  "the portable limit; declare cluster_nonportable for up to 16") +
                                 "), got " + std::to_string(size));
    return true;
  }
  bool tensor_maps(const json::Value& x) {
    if (!list(x, "tensor_maps", 0, 16)) return false;
    for (size_t k = 0; k < x.items.size(); ++k) {
      const std::string field = "tensor_maps[" + std::to_string(k) + "]";
      const json::Value& t = x.items[k];
      if (!object(t, field)) return false;
      static const char* keys[] = {"arg", "box", "swizzle"};
      if (!known_keys(t, field, keys, 3)) return false;
      TensorMapSpec spec;
      const json::Value* a = t.get("arg");
      if (!a) return fail(field + ".arg", "missing (required)");
      spec.arg = array_name(*a, field + ".arg");
      if (spec.arg < 0) return false;
      if (c_.args[spec.arg].optional)
        return fail(field + ".arg", "'" + c_.args[spec.arg].name + "' is optional (may be None); a TMA tensor map "
                                    "needs an array at every launch", spec.arg);
      const ArgSpec& as = c_.args[spec.arg];
      const json::Value* b = t.get("box");
      if (!b) return fail(field + ".box", "missing (required)", spec.arg);
      if (!list(*b, field + ".box", 1, 5)) return false;
      if (as.ndim >= 0 && static_cast<int>(b->items.size()) != as.ndim)
        return fail(field + ".box", "'" + as.name + "' is declared " + std::to_string(as.ndim) + "-d, the box has " +
                                        std::to_string(b->items.size()) + " axes", spec.arg);
      for (size_t d = 0; d < b->items.size(); ++d) {
        int64_t v;
        if (!integer(b->items[d], field + ".box[" + std::to_string(d) + "]", 1, 256, v, spec.arg)) return false;
        spec.box.push_back(v);
      }
      int64_t sw = 0;
      if (const json::Value* w = t.get("swizzle")) {
        if (!integer(*w, field + ".swizzle", 0, 128, sw, spec.arg)) return false;
        if (sw != 0 && sw != 32 && sw != 64 && sw != 128)
          return fail(field + ".swizzle", "expected 0, 32, 64 or 128 (bytes), got " + std::to_string(sw), spec.arg);
      }
      spec.swizzle = static_cast<int>(sw);
      const int64_t item = as.dtype == DType::any ? 0 : dtype_itemsize(as.dtype);
      if (item > 0 && sw > 0 && spec.box.back() * item > sw)
        return fail(field + ".box", "the innermost box extent (" + std::to_string(spec.box.back() * item) +
                                        " bytes) exceeds the " + std::to_string(sw) + "-byte swizzle span", spec.arg);
      if (item > 0 && (spec.box.back() * item) % 16 != 0)
        return fail(field + ".box", "the innermost box extent must be a multiple of 16 bytes, got " +
                                        std::to_string(spec.box.back() * item), spec.arg);
      c_.tensor_maps.push_back(std::move(spec));
    }
    return true;
  }
  bool fault_sites(const json::Value& x) {
    if (!list(x, "fault_sites", 0, 1u << 20)) return false;
    for (size_t k = 0; k < x.items.size(); ++k) {
      std::string field = "fault_sites[" + std::to_string(k) + "]";
      const json::Value& s = x.items[k];
      if (!object(s, field)) return false;
      static const char* keys[] = {"id", "array", "file", "line", "text"};
      if (!known_keys(s, field, keys, 5)) return false;
      FaultSite site;
      const json::Value* id = s.get("id");
      if (!id) return fail(field + ".id", "missing (required)");
      if (!integer(*id, field + ".id", 0, INT64_MAX, site.id)) return false;
      if (const json::Value* v = s.get("array")) {
        // Informational: a kernel argument, a shared-memory array or a device-function parameter.
        if (!string(*v, field + ".array", site.array)) return false;
      }
      if (const json::Value* v = s.get("file")) { if (!string(*v, field + ".file", site.file)) return false; }
      if (const json::Value* v = s.get("line")) { if (!integer(*v, field + ".line", 0, INT64_MAX, site.line)) return false; }
      if (const json::Value* v = s.get("text")) { if (!string(*v, field + ".text", site.text)) return false; }
      for (const FaultSite& f : c_.fault_sites)
        if (f.id == site.id) return fail(field + ".id", "duplicate fault site id " + std::to_string(site.id));
      c_.fault_sites.push_back(site);
    }
    c_.has_fault_buffer = !c_.fault_sites.empty();
    return true;
  }
};

inline void write_dims(std::string& o, const int* d, int n) {
  o += '[';
  for (int k = 0; k < n; ++k) o += (k ? "," : "") + std::to_string(d[k]);
  o += ']';
}

}  // namespace detail

inline Error parse_contract(const std::string& text, LaunchContract& out) {
  out = LaunchContract();
  json::Value root;
  std::string why;
  json::Reader reader(text);
  detail::ContractReader cr(out);
  if (!reader.parse(root, why)) {
    cr.fail("JSON", why);
  } else {
    cr.read(root);
  }
  if (cr.error) {
    std::string kernel = out.kernel;
    out = LaunchContract();
    out.kernel = kernel;
  }
  return cr.error;
}

inline std::string contract_to_json(const LaunchContract& c) {
  using json::write_string;
  std::string o = "{\"version\":1,\"kernel\":";
  write_string(o, c.kernel);
  o += ",\"domain\":" + std::to_string(c.domain);
  if (c.strict_domain) o += ",\"strict_domain\":true";   // only when set: other contracts keep their bytes
  if (c.block_exact) { o += ",\"block\":{\"exact\":"; detail::write_dims(o, c.block, 3); o += '}'; }
  else if (c.max_threads > 0) o += ",\"block\":{\"max_threads\":" + std::to_string(c.max_threads) + "}";
  o += std::string(",\"dynamic_smem\":{\"") + (c.smem_exact ? "exact" : "max") + "\":" + std::to_string(c.smem) + "}";
  o += ",\"min_cc\":" + std::to_string(c.min_cc) + ",\"args\":[";
  for (size_t k = 0; k < c.args.size(); ++k) {
    const ArgSpec& a = c.args[k];
    o += k ? ",{\"name\":" : "{\"name\":";
    write_string(o, a.name);
    o += std::string(",\"kind\":\"") + (a.kind == ArgKind::array ? "array" : "scalar") + "\",\"dtype\":\"" +
         dtype_name(a.dtype) + "\"";
    if (a.kind == ArgKind::array) {
      o += ",\"ndim\":" + std::to_string(a.ndim) + ",\"layout\":\"" + detail::layout_name(a.layout) +
           "\",\"align\":" + std::to_string(a.align) + ",\"access\":\"" + detail::access_name(a.access) +
           "\",\"abi\":\"" + detail::abi_name(a.abi) + "\"";
      if (a.optional) o += ",\"optional\":true";   // only when set: other contracts keep their bytes
    }
    o += '}';
  }
  o += "],\"requires\":[";
  for (size_t k = 0; k < c.requires_text.size(); ++k) { if (k) o += ','; write_string(o, c.requires_text[k]); }
  o += "],\"inplace\":[";
  for (size_t k = 0; k < c.inplace.size(); ++k) {
    o += k ? ",[" : "[";
    write_string(o, c.args[c.inplace[k].first].name);
    o += ',';
    write_string(o, c.args[c.inplace[k].second].name);
    o += ']';
  }
  o += ']';
  if (c.grid_from_arg >= 0) {
    o += ",\"grid_from\":{\"arg\":";
    write_string(o, c.args[c.grid_from_arg].name);
    if (c.grid_tile.empty()) {
      o += ",\"per_thread\":";
      detail::write_dims(o, c.per_thread, 3);
    } else {
      o += ",\"tile\":[";
      for (size_t k = 0; k < c.grid_tile.size(); ++k) o += (k ? "," : "") + std::to_string(c.grid_tile[k]);
      o += ']';
      if (c.max_blocks_per_sm > 0) o += ",\"max_blocks_per_sm\":" + std::to_string(c.max_blocks_per_sm);
    }
    o += '}';
  }
  o += ",\"fault_sites\":[";
  for (size_t k = 0; k < c.fault_sites.size(); ++k) {
    const FaultSite& f = c.fault_sites[k];
    o += (k ? ",{\"id\":" : "{\"id\":") + std::to_string(f.id) + ",\"array\":";
    write_string(o, f.array);
    o += ",\"file\":";
    write_string(o, f.file);
    o += ",\"line\":" + std::to_string(f.line) + ",\"text\":";
    write_string(o, f.text);
    o += '}';
  }
  o += ']';
  if (!c.tensor_maps.empty()) {   // only when present: contracts without tensor maps keep their bytes
    o += ",\"tensor_maps\":[";
    for (size_t k = 0; k < c.tensor_maps.size(); ++k) {
      const TensorMapSpec& t = c.tensor_maps[k];
      o += k ? ",{\"arg\":" : "{\"arg\":";
      write_string(o, c.args[t.arg].name);
      o += ",\"box\":[";
      for (size_t d = 0; d < t.box.size(); ++d) o += (d ? "," : "") + std::to_string(t.box[d]);
      o += "],\"swizzle\":" + std::to_string(t.swizzle) + "}";
    }
    o += ']';
  }
  // launch features: only when set, so contracts without them keep their bytes (and checksums)
  if (c.pdl) o += ",\"pdl\":true";
  if (c.cooperative) o += ",\"cooperative\":true";
  if (c.has_cluster()) { o += ",\"cluster\":"; detail::write_dims(o, c.cluster, 3); }
  if (c.cluster_nonportable) o += ",\"cluster_nonportable\":true";
  o += '}';
  return o;
}

}  // namespace kb
