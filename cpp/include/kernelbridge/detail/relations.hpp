// kernelbridge: the `requires` relation language of launch contracts (docs/architecture.md).
//
// Why parsed once into a flat typed tree: a syntax error or unknown name is a contract-definition
// error found when the contract is parsed, and evaluation at launch allocates nothing unless it fails.
//
// Launch terms: `grid.x|y|z` and `block.x|y|z` name the launch configuration (not arguments; an
// argument called `grid` keeps `grid.shape` etc.). A relation with one is checked once the grid and
// block are resolved (Relation::uses_launch). A relation naming an array passed as None (an optional
// argument) is skipped at that launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/detail/json.hpp"

namespace kb {

struct RelNode {
  enum class Op : uint8_t {
    lit, len, shape_k, shape, size, ndim, scalar,          // terms (argument terms: len .. scalar)
    grid, block,                                           // launch terms: k = axis (0 x, 1 y, 2 z)
    tuple, neg, add, sub, mul, floordiv, mod,              // arithmetic / tuple literal
    cmp, and_                                              // booleans
  };
  enum class Type : uint8_t { integer, tuple, boolean };
  Op op = Op::lit;
  Type type = Type::integer;
  int arg = -1;                  // argument position for argument terms (-1 for launch terms)
  int64_t k = 0;                 // literal value, the axis of x.shape[k], or of grid.k / block.k
  std::vector<int> kids;         // child node indices
  std::vector<uint8_t> cmp_ops;  // for cmp: operator between kids[i] and kids[i+1]
  uint32_t begin = 0, end = 0;   // source span in Relation::text
  bool is_term() const { return op >= Op::len && op <= Op::block; }       // argument or launch term
  bool is_launch() const { return op == Op::grid || op == Op::block; }
};

struct Relation {
  std::string text;
  std::vector<RelNode> nodes;
  int root = -1;
  bool uses_launch = false;        // names grid.* or block.*: checked after the grid is resolved
};

namespace detail {

// Bounds on one relation, whatever its shape (left-deep chains like `a + 0 + 0 + ...` included): the
// parser refuses deeper or larger trees, so every evaluator below recurses at most kMaxRelDepth deep.
constexpr int kMaxRelDepth = 64;
constexpr size_t kMaxRelNodes = 4096;

enum CmpOp : uint8_t { cmp_eq, cmp_ne, cmp_lt, cmp_le, cmp_gt, cmp_ge };
inline const char* cmp_text(uint8_t op) {
  static const char* t[] = {"==", "!=", "<", "<=", ">", ">="};
  return t[op];
}

// A relation value: an integer, a boolean (as 0/1) or a tuple of up to kMaxDims integers.
struct RelValue {
  bool is_tuple = false;
  int n = 0;
  int64_t v = 0;
  int64_t t[kMaxDims];             // first n valid (left uninitialised: evaluation is on the launch path)
};

class RelationParser {
 public:
  RelationParser(const std::string& text, const LaunchContract& c, Relation& out)
      : s_(text), c_(c), r_(out) {}

  // Returns false with `error` describing the problem (the caller adds kernel and field).
  bool parse(std::string& error) {
    r_.text = s_;
    r_.nodes.clear();
    r_.uses_launch = false;
    height_.clear();
    pos_ = 0;
    int root = conj();
    if (root >= 0) {
      skip_ws();
      if (peek("or") || peek("not")) root = fail("only 'and' may combine relations");
      else if (pos_ < s_.size()) root = fail("unexpected '" + json::utf8_char_at(s_, pos_) + "'");
    }
    if (root >= 0 && r_.nodes[root].type != RelNode::Type::boolean)
      root = fail_at(0, "a relation must be a comparison (==, !=, <, <=, >, >=)");
    if (root < 0) { error = err_; return false; }
    r_.root = root;
    return true;
  }

 private:
  const std::string& s_;
  const LaunchContract& c_;
  Relation& r_;
  size_t pos_ = 0;
  std::string err_;
  int depth_ = 0;

  int fail_at(size_t at, const std::string& what) {
    if (err_.empty()) err_ = what + " (at column " + std::to_string(json::utf8_column(s_, at) + 1) + ")";
    return -1;
  }
  int fail(const std::string& what) { return fail_at(pos_, what); }
  void skip_ws() { while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_; }
  static bool ident_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
  static bool ident_char(char ch) { return ident_start(ch) || (ch >= '0' && ch <= '9'); }
  bool peek(const char* tok) {
    skip_ws();
    size_t n = 0;
    while (tok[n]) ++n;
    if (s_.compare(pos_, n, tok) != 0) return false;
    if (ident_start(tok[0]) && pos_ + n < s_.size() && ident_char(s_[pos_ + n])) return false;
    return true;
  }
  bool eat(const char* tok) {
    if (!peek(tok)) return false;
    size_t n = 0;
    while (tok[n]) ++n;
    pos_ += n;
    return true;
  }
  std::string ident() {
    skip_ws();
    size_t b = pos_;
    if (pos_ < s_.size() && ident_start(s_[pos_])) while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  std::vector<uint8_t> height_;  // per node: 1 + the height of its tallest child (bounded by kMaxRelDepth)

  // Appends a node; -1 (an error) when the tree would get deeper than kMaxRelDepth or larger than
  // kMaxRelNodes, so no later recursion over it can run away.
  int add(RelNode n) {
    int h = 1;
    for (int k : n.kids) h = std::max(h, height_[static_cast<size_t>(k)] + 1);
    if (h > kMaxRelDepth)
      return fail("expression nested too deeply (more than " + std::to_string(kMaxRelDepth) + " levels of operators)");
    if (r_.nodes.size() >= kMaxRelNodes)
      return fail("relation too long (more than " + std::to_string(kMaxRelNodes) + " terms and operators)");
    height_.push_back(static_cast<uint8_t>(h));
    r_.nodes.push_back(std::move(n));
    return static_cast<int>(r_.nodes.size()) - 1;
  }
  int binary(RelNode::Op op, int a, int b, size_t begin) {
    RelNode n;
    n.op = op;
    n.kids = {a, b};
    n.begin = static_cast<uint32_t>(begin);
    n.end = static_cast<uint32_t>(pos_);
    return add(n);
  }
  const char* tname(RelNode::Type t) {
    return t == RelNode::Type::integer ? "an integer" : t == RelNode::Type::tuple ? "a tuple" : "a comparison";
  }
  std::string text(size_t begin, size_t end) const {
    std::string t = s_.substr(begin, end - begin);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
    return t;
  }
  std::string span(int node) const { return text(r_.nodes[node].begin, r_.nodes[node].end); }

  int conj() {
    size_t b = (skip_ws(), pos_);
    int left = cmp();
    if (left < 0) return -1;
    if (!peek("and")) return left;
    RelNode n;
    n.op = RelNode::Op::and_;
    n.type = RelNode::Type::boolean;
    n.kids.push_back(left);
    while (eat("and")) {
      int right = cmp();
      if (right < 0) return -1;
      n.kids.push_back(right);
    }
    for (int k : n.kids)
      if (r_.nodes[k].type != RelNode::Type::boolean)
        return fail_at(r_.nodes[k].begin, "'and' needs comparisons on both sides, got '" + span(k) + "'");
    n.begin = static_cast<uint32_t>(b);
    n.end = static_cast<uint32_t>(pos_);
    return add(n);
  }
  bool cmp_op(uint8_t& op) {
    if (eat("==")) op = cmp_eq; else if (eat("!=")) op = cmp_ne; else if (eat("<=")) op = cmp_le;
    else if (eat(">=")) op = cmp_ge; else if (eat("<")) op = cmp_lt; else if (eat(">")) op = cmp_gt;
    else return false;
    return true;
  }
  int cmp() {
    size_t b = (skip_ws(), pos_);
    int left = sum();
    if (left < 0) return -1;
    uint8_t op;
    if (peek("or") || peek("not")) return fail("only 'and' may combine relations");
    if (!cmp_op(op)) return left;
    RelNode n;
    n.op = RelNode::Op::cmp;
    n.type = RelNode::Type::boolean;
    n.kids.push_back(left);
    do {
      int right = sum();
      if (right < 0) return -1;
      n.cmp_ops.push_back(op);
      n.kids.push_back(right);
    } while (cmp_op(op));
    for (size_t k = 0; k < n.kids.size(); ++k) {
      const RelNode& kid = r_.nodes[n.kids[k]];
      if (kid.type == RelNode::Type::boolean)
        return fail_at(kid.begin, "cannot compare a comparison '" + span(n.kids[k]) + "'");
    }
    for (size_t k = 0; k < n.cmp_ops.size(); ++k) {
      const RelNode& a = r_.nodes[n.kids[k]];
      const RelNode& z = r_.nodes[n.kids[k + 1]];
      if (a.type != z.type)
        return fail_at(a.begin, std::string("cannot compare ") + tname(a.type) + " with " + tname(z.type) + " in '" +
                                    text(a.begin, z.end) + "'");
      if (a.type == RelNode::Type::tuple && n.cmp_ops[k] != cmp_eq && n.cmp_ops[k] != cmp_ne)
        return fail_at(a.begin, std::string("tuples can only be compared with == or !=, got '") +
                                    cmp_text(n.cmp_ops[k]) + "'");
    }
    n.begin = static_cast<uint32_t>(b);
    n.end = static_cast<uint32_t>(pos_);
    return add(n);
  }
  bool need_int(int node) {
    if (r_.nodes[node].type == RelNode::Type::integer) return true;
    fail_at(r_.nodes[node].begin, std::string("arithmetic needs integers, got ") + tname(r_.nodes[node].type) +
                                      " '" + span(node) + "'");
    return false;
  }
  int sum() {
    size_t b = (skip_ws(), pos_);
    int left = prod();
    while (left >= 0) {
      RelNode::Op op;
      if (eat("+")) op = RelNode::Op::add; else if (eat("-")) op = RelNode::Op::sub; else break;
      int right = prod();
      if (right < 0 || !need_int(left) || !need_int(right)) return -1;
      left = binary(op, left, right, b);
    }
    return left;
  }
  int prod() {
    size_t b = (skip_ws(), pos_);
    int left = unary();
    while (left >= 0) {
      RelNode::Op op;
      if (eat("*")) op = RelNode::Op::mul;
      else if (eat("//")) op = RelNode::Op::floordiv;
      else if (eat("%")) op = RelNode::Op::mod;
      else if (peek("/")) return fail("'/' is not integer division: use '//'");
      else break;
      int right = unary();
      if (right < 0 || !need_int(left) || !need_int(right)) return -1;
      left = binary(op, left, right, b);
    }
    return left;
  }
  int unary() {
    size_t b = (skip_ws(), pos_);
    if (depth_ > 64) return fail("expression nested too deeply");
    if (eat("-")) {
      ++depth_;
      int x = unary();
      --depth_;
      if (x < 0 || !need_int(x)) return -1;
      RelNode n;
      n.op = RelNode::Op::neg;
      n.kids = {x};
      n.begin = static_cast<uint32_t>(b);
      n.end = static_cast<uint32_t>(pos_);
      return add(n);
    }
    if (eat("+")) {
      ++depth_;
      int x = unary();
      --depth_;
      if (x < 0 || !need_int(x)) return -1;
      return x;
    }
    return atom();
  }
  bool integer(int64_t& v) {
    skip_ws();
    size_t b = pos_;
    uint64_t acc = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (acc > (static_cast<uint64_t>(INT64_MAX) - d) / 10) { fail_at(b, "integer literal too large"); return false; }
      acc = acc * 10 + d;
      ++pos_;
    }
    if (pos_ == b) { fail("expected an integer"); return false; }
    if (pos_ < s_.size() && ident_char(s_[pos_])) { fail("invalid integer literal"); return false; }
    v = static_cast<int64_t>(acc);
    return true;
  }
  int array_arg(const std::string& name, size_t at, const char* use) {
    int a = find_arg(c_, name);
    if (a < 0) return fail_at(at, "unknown name '" + name + "' (not an argument)");
    if (c_.args[a].kind != ArgKind::array)
      return fail_at(at, "'" + name + "' is a scalar; " + use + " needs an array argument");
    return a;
  }
  int atom() {
    skip_ws();
    size_t b = pos_;
    if (pos_ >= s_.size()) return fail("unexpected end of relation");
    char ch = s_[pos_];
    RelNode n;
    n.begin = static_cast<uint32_t>(b);
    if (ch >= '0' && ch <= '9') {
      if (!integer(n.k)) return -1;
      n.op = RelNode::Op::lit;
    } else if (ch == '(') {
      ++pos_;
      if (++depth_ > 64) return fail("expression nested too deeply");
      int first = conj();
      if (first < 0) return -1;
      if (eat(",")) {
        n.op = RelNode::Op::tuple;
        n.type = RelNode::Type::tuple;
        n.kids.push_back(first);
        while (!peek(")")) {
          int x = sum();
          if (x < 0) return -1;
          n.kids.push_back(x);
          if (!eat(",")) break;
        }
        if (n.kids.size() > static_cast<size_t>(kMaxDims)) return fail_at(b, "tuple longer than 8 elements");
        for (int k : n.kids)
          if (r_.nodes[k].type != RelNode::Type::integer)
            return fail_at(r_.nodes[k].begin, "tuple elements must be integers, got '" + span(k) + "'");
      }
      if (!eat(")")) return fail("expected ')'");
      --depth_;
      if (n.op != RelNode::Op::tuple) {  // plain parentheses: widen the span, keep the node
        r_.nodes[first].begin = static_cast<uint32_t>(b);
        r_.nodes[first].end = static_cast<uint32_t>(pos_);
        return first;
      }
    } else if (ident_start(ch)) {
      std::string name = ident();
      if (name == "and" || name == "or" || name == "not") return fail_at(b, "unexpected '" + name + "'");
      if (name == "len" && peek("(")) {
        eat("(");
        size_t at = (skip_ws(), pos_);
        std::string x = ident();
        if (x.empty()) return fail("expected an argument name inside len()");
        if ((n.arg = array_arg(x, at, "len()")) < 0) return -1;
        if (c_.args[n.arg].ndim == 0) return fail_at(at, "len() of '" + x + "', declared 0-d");
        if (!eat(")")) return fail("expected ')'");
        n.op = RelNode::Op::len;
      } else if (eat(".")) {
        size_t at = (skip_ws(), pos_);
        std::string attr = ident();
        if ((name == "grid" || name == "block") && (attr == "x" || attr == "y" || attr == "z")) {
          n.op = name == "grid" ? RelNode::Op::grid : RelNode::Op::block;
          n.k = attr[0] - 'x';
          r_.uses_launch = true;
          n.end = static_cast<uint32_t>(pos_);
          return add(n);
        }
        if ((name == "grid" || name == "block") && find_arg(c_, name) < 0)
          return fail_at(at, "unknown attribute '." + attr + "' of the launch " + name + " (expected " + name +
                                 ".x, " + name + ".y or " + name + ".z)");
        const char* use = attr == "shape" ? ".shape" : attr == "size" ? ".size" : ".ndim";
        if (attr != "shape" && attr != "size" && attr != "ndim")
          return fail_at(at, "unknown attribute '." + attr + "' (expected .shape, .shape[k], .size or .ndim)");
        if ((n.arg = array_arg(name, b, use)) < 0) return -1;
        if (attr == "size") n.op = RelNode::Op::size;
        else if (attr == "ndim") n.op = RelNode::Op::ndim;
        else if (eat("[")) {
          bool neg = eat("-");
          int64_t k;
          if (!integer(k)) return -1;
          if (!eat("]")) return fail("expected ']'");
          n.k = neg ? -k : k;
          int nd = c_.args[n.arg].ndim;
          if (nd >= 0 && (n.k >= nd || n.k < -nd))
            return fail_at(b, "axis " + std::to_string(n.k) + " out of range for '" + name + "', declared " +
                                  std::to_string(nd) + "-d");
          if (n.k >= kMaxDims || n.k < -kMaxDims) return fail_at(b, "axis out of range");
          n.op = RelNode::Op::shape_k;
        } else {
          n.op = RelNode::Op::shape;
          n.type = RelNode::Type::tuple;
        }
      } else {
        int a = find_arg(c_, name);
        if (a < 0 && (name == "grid" || name == "block"))
          return fail_at(b, "'" + name + "' alone is not a value; use " + name + ".x, " + name + ".y or " + name +
                                ".z (the launch " + name + "'s extent along that axis)");
        if (a < 0) return fail_at(b, "unknown name '" + name + "' (not an argument)");
        const ArgSpec& sp = c_.args[a];
        if (sp.kind != ArgKind::scalar)
          return fail_at(b, "'" + name + "' is an array; use len(" + name + "), " + name + ".shape[k], " + name +
                                ".size or " + name + ".ndim");
        if (!(sp.dtype == DType::bool_ || dtype_is_signed_int(sp.dtype) || dtype_is_unsigned_int(sp.dtype)))
          return fail_at(b, "scalar '" + name + "' is " + dtype_long_name(sp.dtype) +
                                "; relations compute with integer scalars only");
        n.arg = a;
        n.op = RelNode::Op::scalar;
      }
    } else {
      return fail("unexpected '" + json::utf8_char_at(s_, pos_) + "'");
    }
    n.end = static_cast<uint32_t>(pos_);
    return add(n);
  }
};

// Python floor division / modulo with overflow and zero checks.
inline bool floordiv(int64_t a, int64_t b, int64_t& q, std::string* err) {
  if (b == 0) { if (err) *err = "division by zero"; return false; }
  if (a == INT64_MIN && b == -1) { if (err) *err = "integer overflow"; return false; }
  q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return true;
}
inline bool floormod(int64_t a, int64_t b, int64_t& m, std::string* err) {
  if (b == 0) { if (err) *err = "modulo by zero"; return false; }
  if (b == -1) { m = 0; return true; }
  m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return true;
}

// Evaluates node `i`. Returns false (with `err` when given) on an evaluation error. `cfg`: the
// resolved launch configuration for launch terms (nullptr: not known yet, an evaluation error).
// `depth` guards hand-built Relations too (parsed ones are at most kMaxRelDepth deep).
inline bool eval_relation(const Relation& r, int i, const ArgValue* args, const LaunchConfig* cfg, RelValue& out,
                          std::string* err, int depth = 0) {
  if (depth > kMaxRelDepth || i < 0 || static_cast<size_t>(i) >= r.nodes.size()) {
    if (err) *err = "relation nested too deeply or malformed";
    return false;
  }
  const RelNode& n = r.nodes[i];
  out.is_tuple = false;
  switch (n.op) {
    case RelNode::Op::lit: out.v = n.k; return true;
    case RelNode::Op::grid: case RelNode::Op::block: {
      if (cfg == nullptr || n.k < 0 || n.k > 2) { if (err) *err = "the launch configuration is not known yet"; return false; }
      out.v = n.op == RelNode::Op::grid ? cfg->grid[n.k] : static_cast<int64_t>(cfg->block[n.k]);
      return true;
    }
    case RelNode::Op::scalar: {
      const ArgValue& a = args[n.arg];
      if (a.is_big_unsigned || a.huge_int) { if (err) *err = "integer overflow"; return false; }
      out.v = a.i;
      return true;
    }
    case RelNode::Op::len: case RelNode::Op::shape_k: case RelNode::Op::shape:
    case RelNode::Op::size: case RelNode::Op::ndim: {
      const ArrayView& v = args[n.arg].array;
      if (n.op == RelNode::Op::ndim) { out.v = v.ndim; return true; }
      if (n.op == RelNode::Op::size) { out.v = v.size(); return true; }
      if (n.op == RelNode::Op::shape) {
        out.is_tuple = true;
        out.n = v.ndim;
        for (int k = 0; k < v.ndim; ++k) out.t[k] = v.shape[k];
        return true;
      }
      int64_t k = n.op == RelNode::Op::len ? 0 : n.k;
      if (k < 0) k += v.ndim;
      if (k < 0 || k >= v.ndim) {
        if (err) *err = "axis " + std::to_string(n.op == RelNode::Op::len ? 0 : n.k) + " out of range for a " +
                        std::to_string(v.ndim) + "-d array";
        return false;
      }
      out.v = v.shape[k];
      return true;
    }
    case RelNode::Op::tuple: {
      RelValue x;
      out.is_tuple = true;
      out.n = static_cast<int>(n.kids.size());
      for (size_t k = 0; k < n.kids.size(); ++k) {
        if (!eval_relation(r, n.kids[k], args, cfg, x, err, depth + 1)) return false;
        out.t[k] = x.v;
      }
      return true;
    }
    case RelNode::Op::neg: {
      RelValue x;
      if (!eval_relation(r, n.kids[0], args, cfg, x, err, depth + 1)) return false;
      if (x.v == INT64_MIN) { if (err) *err = "integer overflow"; return false; }
      out.v = -x.v;
      return true;
    }
    case RelNode::Op::add: case RelNode::Op::sub: case RelNode::Op::mul:
    case RelNode::Op::floordiv: case RelNode::Op::mod: {
      RelValue a, b;
      if (!eval_relation(r, n.kids[0], args, cfg, a, err, depth + 1) ||
          !eval_relation(r, n.kids[1], args, cfg, b, err, depth + 1))
        return false;
      bool ovf = false;
      switch (n.op) {
        case RelNode::Op::add: ovf = __builtin_add_overflow(a.v, b.v, &out.v); break;
        case RelNode::Op::sub: ovf = __builtin_sub_overflow(a.v, b.v, &out.v); break;
        case RelNode::Op::mul: ovf = __builtin_mul_overflow(a.v, b.v, &out.v); break;
        case RelNode::Op::floordiv: return floordiv(a.v, b.v, out.v, err);
        default: return floormod(a.v, b.v, out.v, err);
      }
      if (ovf) { if (err) *err = "integer overflow"; return false; }
      return true;
    }
    case RelNode::Op::cmp: {
      RelValue vals[2];
      RelValue* pa = &vals[0];
      RelValue* pb = &vals[1];
      if (!eval_relation(r, n.kids[0], args, cfg, *pa, err, depth + 1)) return false;
      out.v = 1;
      for (size_t k = 0; k < n.cmp_ops.size(); ++k) {
        if (!eval_relation(r, n.kids[k + 1], args, cfg, *pb, err, depth + 1)) return false;
        const RelValue& a = *pa;
        const RelValue& b = *pb;
        bool ok;
        if (a.is_tuple) {
          bool eq = a.n == b.n;
          for (int e = 0; eq && e < a.n; ++e) eq = a.t[e] == b.t[e];
          ok = n.cmp_ops[k] == cmp_eq ? eq : !eq;
        } else {
          switch (n.cmp_ops[k]) {
            case cmp_eq: ok = a.v == b.v; break;
            case cmp_ne: ok = a.v != b.v; break;
            case cmp_lt: ok = a.v < b.v; break;
            case cmp_le: ok = a.v <= b.v; break;
            case cmp_gt: ok = a.v > b.v; break;
            default: ok = a.v >= b.v; break;
          }
        }
        if (!ok) { out.v = 0; return true; }
        RelValue* t = pa;  // chained comparison: the right operand is the next left one
        pa = pb;
        pb = t;
      }
      return true;
    }
    case RelNode::Op::and_: {
      RelValue x;
      out.v = 1;
      for (int k : n.kids) {
        if (!eval_relation(r, k, args, cfg, x, err, depth + 1)) return false;
        if (!x.v) { out.v = 0; return true; }
      }
      return true;
    }
  }
  return false;
}

// Source text of node `i`, without the blanks the parser skipped after it.
inline std::string node_text(const Relation& r, int i) {
  const RelNode& n = r.nodes[i];
  std::string t = r.text.substr(n.begin, n.end - n.begin);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
  return t;
}

inline std::string rel_value_text(const RelValue& v) {
  if (!v.is_tuple) return std::to_string(v.v);
  std::string s = "(";
  for (int k = 0; k < v.n; ++k) s += (k ? ", " : "") + std::to_string(v.t[k]);
  return s + (v.n == 1 ? ",)" : ")");
}

// The first false comparison under `i` (or -1), to explain a failed relation.
inline int failing_comparison(const Relation& r, int i, const ArgValue* args, const LaunchConfig* cfg,
                              int depth = 0) {
  if (depth > kMaxRelDepth) return -1;
  const RelNode& n = r.nodes[i];
  RelValue x;
  if (n.op == RelNode::Op::and_) {
    for (int k : n.kids) { int f = failing_comparison(r, k, args, cfg, depth + 1); if (f >= 0) return f; }
    return -1;
  }
  if (!eval_relation(r, i, args, cfg, x, nullptr, depth) || !x.v) return i;
  return -1;
}

// Whether relation `r` names an argument passed as None (an absent optional array): then it is
// skipped at this launch (docs/architecture.md, "Optional arrays").
inline bool names_absent(const Relation& r, const ArgValue* args) {
  for (const RelNode& n : r.nodes)
    if (n.arg >= 0 && n.op != RelNode::Op::lit && !n.is_launch() && args[n.arg].none) return true;
  return false;
}

// Leaf terms of the subtree `i` (argument and launch terms), in source order, without repeats.
inline void collect_terms(const Relation& r, int i, std::vector<int>& out, int depth = 0) {
  if (depth > kMaxRelDepth) return;
  const RelNode& n = r.nodes[i];
  if (n.is_term()) {
    for (int o : out) {
      const RelNode& m = r.nodes[o];
      if (m.op == n.op && m.arg == n.arg && m.k == n.k) return;
    }
    out.push_back(i);
    return;
  }
  for (int k : n.kids) collect_terms(r, k, out, depth + 1);
}

}  // namespace detail
}  // namespace kb
