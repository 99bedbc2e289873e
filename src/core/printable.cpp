#include "core/printable.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace rrfp {

namespace {

// The length of the well-formed UTF-8 character at the start of `s` (2 to 4 bytes), or 0.
std::size_t utf8_length(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range (overlong and surrogates out)
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  }
  if (n == 0 || s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  return n;
}

// The code point of the well-formed `n`-byte character at the start of `s`.
char32_t code_point(std::string_view s, std::size_t n) {
  const auto b = [&](std::size_t i) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i]));
  };
  char32_t cp = b(0) & (0x7f >> n);
  for (std::size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (b(i) & 0x3f);
  return cp;
}

// A well-formed character that shows nothing, or changes how the rest shows: the C1 controls
// (a terminal may take U+009B as an escape sequence's start), the marks and overrides of
// bidirectional text (a name read backwards, or a message's end shown before its start), the
// line and paragraph separators, the zero-width and other invisible format characters (a soft
// hyphen, joiners, the Hangul filler, tags), and the byte order mark.
bool hides(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x61c || cp == 0x180e ||
         (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
         (cp >= 0x2060 && cp <= 0x206f) || cp == 0x3164 || cp == 0xfeff ||
         (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe0000 && cp <= 0xe007f);
}

}  // namespace

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  out.reserve(std::min(s.size(), max));
  std::size_t i = 0;
  while (i < s.size() && i < max) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += s[i++];
      continue;
    }
    const std::size_t n = c >= 0x80 ? utf8_length(s.substr(i)) : 0;
    if (n > 0 && !hides(code_point(s.substr(i), n))) {
      out += s.substr(i, n);
      i += n;
      continue;
    }
    // Every byte of a character that hides is escaped: bash's $'...' reads the bytes back.
    for (const std::size_t end = i + std::max<std::size_t>(n, 1); i < end; ++i) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += hex;
    }
  }
  // Cut short, it says so: '123456789012345678901' cut at 20 read as another value, typed.
  if (i < s.size()) out += "...";
  return out;
}

std::string visible(std::string_view s) {
  return printable(s, s.size());
}

std::string one_line(std::string_view what) {
  while (!what.empty() && std::isspace(static_cast<unsigned char>(what.back())))
    what.remove_suffix(1);
  return visible(what);
}

std::string xml_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(s.substr(i));
      out += n > 0 ? s.substr(i, n) : std::string_view("\xEF\xBF\xBD");
      i += n > 0 ? n : 1;
      continue;
    }
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      out += "\xEF\xBF\xBD";
    else
      out += s[i];
    ++i;
  }
  return out;
}

std::string_view skip_bom(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  return text;
}

}  // namespace rrfp
