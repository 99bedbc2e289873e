#pragma once
// Input echoed in a message, made visible: an error quotes a file's token or line, and the
// bytes it holds may be anything. A NUL cut the whole line short (a message is printed as a C
// string), and a byte order mark or a control byte printed nothing that could be seen.
#include <cstddef>
#include <string>
#include <string_view>

namespace rrfp {

// `s`'s first `max` bytes (a character that starts before them is kept whole), each control
// byte (below 0x20, and 0x7f), each byte that is not part of a well-formed UTF-8 character, and
// each byte of a character that shows nothing or reorders what follows (a C1 control, a
// bidirectional mark or override, a line separator, a byte order mark) written as \xNN; the
// rest as it is; "..." after it where `s` is longer.
std::string printable(std::string_view s, std::size_t max = 40);

// `s` whole, as printable() writes it: a file name echoed in a line for people (raw, a newline
// or an escape sequence in the name reached the terminal).
std::string visible(std::string_view s);

// A message as one visible line: trailing white space dropped, the rest printable() whole. A
// message naming a user's file or value may hold any byte of it: cut at its first newline, "no
// such file" lost its reason; printed raw, an escape sequence reached the terminal.
std::string one_line(std::string_view what);

// `s` as text an XML (SVG) document may hold: each byte that is not part of a well-formed UTF-8
// character, and each control byte XML 1.0 refuses (below 0x20 but tab, newline and carriage
// return), as U+FFFD, as the JSON outputs write them; '<', '>', '&' and '"' as entities. (A
// hint file named in Latin-1 made the timeline SVG a document no XML reader opens.)
std::string xml_text(std::string_view s);

// `text` without a leading UTF-8 byte order mark (EF BB BF), which some editors write first:
// the JSON reader skips it, and the hint formats skip it as well.
std::string_view skip_bom(std::string_view text);

}  // namespace rrfp
