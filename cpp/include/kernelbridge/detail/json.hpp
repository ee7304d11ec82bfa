// kernelbridge: the small strict JSON reader/writer the launch contract needs.
//
// Why our own: the contract header must compile anywhere (g++, nvcc, user C++ code) with no
// dependency. Strict RFC 8259: no comments, no trailing commas, no leading zeros, no duplicate keys.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace kb {
namespace json {

struct Value {
  enum class Type : uint8_t { null, boolean, number, string, array, object } type = Type::null;
  bool b = false;
  bool is_int = false;             // number written without fraction/exponent and fits int64
  int64_t i = 0;
  double d = 0.0;
  std::string s;
  std::vector<Value> items;                              // array
  std::vector<std::pair<std::string, Value>> members;    // object, in document order

  const Value* get(const char* key) const {
    for (const auto& m : members) if (m.first == key) return &m.second;
    return nullptr;
  }
};

// ---- UTF-8 (RFC 8259 text is UTF-8; messages must never cut a character in half) ----------------------

// Length (1..4) of the well-formed UTF-8 sequence at s[pos] (Unicode table 3-7), 0 when there is none.
inline size_t utf8_seq_len(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
  else return 0;
  if (pos + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[pos + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

// Offset of the first byte that is not part of well-formed UTF-8, or std::string::npos.
inline size_t utf8_invalid_at(const std::string& s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t n = utf8_seq_len(s, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string::npos;
}

// The character at s[pos] for a message: the whole code point, or "\xNN" for a byte that starts none.
inline std::string utf8_char_at(const std::string& s, size_t pos) {
  size_t n = utf8_seq_len(s, pos);
  if (n > 0) return s.substr(pos, n);
  if (pos >= s.size()) return std::string();
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(s[pos])));
  return buf;
}

// Characters (not bytes) in s[0, pos): message columns count what an editor shows.
inline size_t utf8_column(const std::string& s, size_t pos) {
  size_t col = 0;
  for (size_t k = 0; k < pos && k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) ++col;
  return col;
}

inline const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::null: return "null";
    case Value::Type::boolean: return "a boolean";
    case Value::Type::number: return "a number";
    case Value::Type::string: return "a string";
    case Value::Type::array: return "an array";
    default: return "an object";
  }
}

class Reader {
 public:
  explicit Reader(const std::string& text) : t_(text) {}

  // Parses the whole text; on failure returns false and sets `error`.
  bool parse(Value& out, std::string& error) {
    pos_ = utf8_invalid_at(t_);
    if (pos_ != std::string::npos) {
      fail("invalid UTF-8 (byte " + utf8_char_at(t_, pos_) + ")");
      error = err_;
      return false;
    }
    pos_ = 0;
    ws();
    if (!value(out, 0)) { error = err_; return false; }
    ws();
    if (pos_ != t_.size()) { fail("unexpected text after the JSON value"); error = err_; return false; }
    return true;
  }

 private:
  const std::string& t_;
  size_t pos_ = 0;
  std::string err_;
  static constexpr int kMaxDepth = 64;

  bool fail(const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos_ && k < t_.size(); ++k) {
      if (t_[k] == '\n') { line++; col = 1; }
      else if ((static_cast<unsigned char>(t_[k]) & 0xC0) != 0x80) { ++col; }  // count characters, not bytes
    }
    err_ = what + " at line " + std::to_string(line) + ", column " + std::to_string(col);
    return false;
  }
  void ws() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r'))
      ++pos_;
  }
  bool literal(const char* word) {
    size_t n = 0;
    while (word[n]) ++n;
    if (t_.compare(pos_, n, word) != 0) return fail("invalid literal");
    pos_ += n;
    return true;
  }
  bool value(Value& v, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 64 levels");
    if (pos_ >= t_.size()) return fail("unexpected end of text");
    char c = t_[pos_];
    switch (c) {
      case '{': return object(v, depth);
      case '[': return array(v, depth);
      case '"': v.type = Value::Type::string; return string(v.s);
      case 't': v.type = Value::Type::boolean; v.b = true; return literal("true");
      case 'f': v.type = Value::Type::boolean; v.b = false; return literal("false");
      case 'n': v.type = Value::Type::null; return literal("null");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number(v);
        return fail("unexpected character '" + utf8_char_at(t_, pos_) + "'");
    }
  }
  bool object(Value& v, int depth) {
    v.type = Value::Type::object;
    ++pos_;
    ws();
    if (pos_ < t_.size() && t_[pos_] == '}') { ++pos_; return true; }
    for (;;) {
      ws();
      if (pos_ >= t_.size() || t_[pos_] != '"') return fail("expected a string key");
      std::string key;
      if (!string(key)) return false;
      if (v.get(key.c_str())) return fail("duplicate key \"" + key + "\"");
      ws();
      if (pos_ >= t_.size() || t_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      ws();
      v.members.emplace_back(std::move(key), Value());
      if (!value(v.members.back().second, depth + 1)) return false;
      ws();
      if (pos_ < t_.size() && t_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < t_.size() && t_[pos_] == '}') { ++pos_; return true; }
      return fail("expected ',' or '}'");
    }
  }
  bool array(Value& v, int depth) {
    v.type = Value::Type::array;
    ++pos_;
    ws();
    if (pos_ < t_.size() && t_[pos_] == ']') { ++pos_; return true; }
    for (;;) {
      ws();
      v.items.emplace_back();
      if (!value(v.items.back(), depth + 1)) return false;
      ws();
      if (pos_ < t_.size() && t_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < t_.size() && t_[pos_] == ']') { ++pos_; return true; }
      return fail("expected ',' or ']'");
    }
  }
  bool hex4(uint32_t& cp) {
    if (pos_ + 4 > t_.size()) return fail("truncated \\u escape");
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      char h = t_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
      else return fail("invalid \\u escape");
    }
    return true;
  }
  static void utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) { out += static_cast<char>(cp); }
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18)); out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool string(std::string& out) {
    ++pos_;  // opening quote
    out.clear();
    while (pos_ < t_.size()) {
      unsigned char c = static_cast<unsigned char>(t_[pos_]);
      if (c == '"') { ++pos_; return true; }
      if (c < 0x20) return fail("control character in string");
      if (c != '\\') { out += static_cast<char>(c); ++pos_; continue; }
      if (++pos_ >= t_.size()) break;
      char e = t_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (t_.compare(pos_, 2, "\\u") != 0) return fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            if (!hex4(lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail("unpaired surrogate in \\u escape");
          }
          utf8(cp, out);
          break;
        }
        default: --pos_; return fail(std::string("invalid escape '\\") + e + "'");
      }
    }
    return fail("unterminated string");
  }
  bool number(Value& v) {
    v.type = Value::Type::number;
    size_t start = pos_;
    if (t_[pos_] == '-') ++pos_;
    if (pos_ >= t_.size() || t_[pos_] < '0' || t_[pos_] > '9') return fail("invalid number");
    if (t_[pos_] == '0') {
      ++pos_;
      if (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') return fail("leading zero in number");
    } else {
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
    }
    bool integral = true;
    if (pos_ < t_.size() && t_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= t_.size() || t_[pos_] < '0' || t_[pos_] > '9') return fail("invalid number");
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) ++pos_;
      if (pos_ >= t_.size() || t_[pos_] < '0' || t_[pos_] > '9') return fail("invalid number");
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
    }
    std::string text = t_.substr(start, pos_ - start);
    v.d = std::strtod(text.c_str(), nullptr);
    if (integral) {
      // exact int64 parse; larger magnitudes stay doubles (is_int false)
      bool neg = text[0] == '-';
      uint64_t acc = 0;
      bool overflow = false;
      for (size_t k = neg ? 1 : 0; k < text.size(); ++k) {
        uint64_t digit = static_cast<uint64_t>(text[k] - '0');
        if (acc > (UINT64_MAX - digit) / 10) { overflow = true; break; }
        acc = acc * 10 + digit;
      }
      uint64_t limit = neg ? (static_cast<uint64_t>(INT64_MAX) + 1) : static_cast<uint64_t>(INT64_MAX);
      if (!overflow && acc <= limit) {
        v.is_int = true;
        v.i = neg ? static_cast<int64_t>(0 - acc) : static_cast<int64_t>(acc);
      }
    }
    return true;
  }
};

// Appends `s` as a JSON string literal (quotes and escapes).
inline void write_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace json
}  // namespace kb
