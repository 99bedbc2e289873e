// SVG timeline: one row per stage (TP rank 0), colour per kind, blocked time hatched, idle
// gaps left as the light background. Several runs stack top to bottom on one time axis.
#include <algorithm>
#include <cstdio>

#include "core/format.hpp"
#include "core/printable.hpp"
#include "report/report.hpp"

namespace rrfp {

namespace {

const char* colour(Kind k) {
  switch (k) {
    case Kind::F:
      return "#4e79a7";
    case Kind::B:
      return "#59a14f";
    case Kind::W:
      return "#f28e2b";
  }
  return "#999";
}

std::string num(double v) {
  return fmt("%.2f", v);  // in the "C" locale's form, whatever the process's
}

// The legend and the time axis, at height y.
std::string legend(double left, double width, double y, std::int64_t span) {
  std::string o;
  double lx = left;
  for (auto [name, k] :
       {std::pair{"F forward", Kind::F}, {"B backward", Kind::B}, {"W weight grad", Kind::W}}) {
    o += "<rect x=\"" + num(lx) + "\" y=\"" + num(y) + "\" width=\"12\" height=\"12\" fill=\"" +
         colour(k) + "\"/><text x=\"" + num(lx + 16) + "\" y=\"" + num(y + 10) + "\">" + name +
         "</text>\n";
    lx += 120;
  }
  o += "<rect x=\"" + num(lx) + "\" y=\"" + num(y) +
       "\" width=\"12\" height=\"12\" fill=\"url(#hatch)\"/>"
       "<text x=\"" +
       num(lx + 16) + "\" y=\"" + num(y + 10) + "\">blocked</text>\n";
  lx += 90;
  o += "<rect x=\"" + num(lx) + "\" y=\"" + num(y) +
       "\" width=\"12\" height=\"12\" fill=\"#eeeeee\"/>"
       "<text x=\"" +
       num(lx + 16) + "\" y=\"" + num(y + 10) + "\">idle</text>\n";
  o += "<text x=\"" + num(left + width) + "\" y=\"" + num(y + 10) + "\" text-anchor=\"end\">0 .. " +
       num(span / 1e6) + " ms</text>\n";
  return o;
}

}  // namespace

std::string svg_timeline(const ReportHeader& h, const std::vector<ReportRun>& runs) {
  const double left = 70, width = 1100, row = 22, title = 34, gap = 16;
  std::int64_t span = 1;
  for (const auto& r : runs)
    span = std::max(span, r.result.makespan);
  const double scale = width / static_cast<double>(span);
  double height = 40;
  for (const auto& r : runs)
    height += title + row * r.result.pp + gap;
  height += 40;
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(left + width + 30) +
                  "\" height=\"" + num(height) +
                  "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o += "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
       "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbe3e3\"/>"
       "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#e15759\" "
       "stroke-width=\"3\"/></pattern></defs>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" +
       xml_text("rrfp timeline — workload " + h.workload +
                (h.seed ? ", seed " + std::to_string(*h.seed) : "") + " (" + h.source + ")") +
       "</text>\n";
  double y = 40;
  for (const auto& r : runs) {
    const auto& m = r.metrics;
    o += "<text x=\"10\" y=\"" + num(y + 20) + "\" font-size=\"12\">" +
         xml_text(r.label + ": makespan " + num(m.makespan / 1e6) + " ms, bubble " +
                  num(100 * m.bubble_ratio) + "%, efficiency " + num(m.efficiency)) +
         "</text>\n";
    y += title;
    for (int s = 0; s < r.result.pp; ++s) {
      const double ry = y + row * s;
      o += "<text x=\"10\" y=\"" + num(ry + 15) + "\">stage " + std::to_string(s) + "</text>\n";
      o += "<rect x=\"" + num(left) + "\" y=\"" + num(ry + 1) + "\" width=\"" +
           num(scale * r.result.makespan) + "\" height=\"" + num(row - 2) +
           "\" fill=\"#eeeeee\"/>\n";
    }
    for (const auto& b : r.result.blocked) {
      if (b.rank != 0) continue;
      o += "<rect x=\"" + num(left + scale * b.start) + "\" y=\"" + num(y + row * b.stage + 1) +
           "\" width=\"" + num(scale * (b.end - b.start)) + "\" height=\"" + num(row - 2) +
           "\" fill=\"url(#hatch)\"/>\n";
    }
    for (const auto& t : r.result.tasks) {
      if (t.rank != 0) continue;
      const double x = left + scale * t.start, w = scale * (t.compute_end - t.start);
      const double ry = y + row * t.stage;
      o += "<rect x=\"" + num(x) + "\" y=\"" + num(ry + 1) + "\" width=\"" + num(std::max(w, 0.5)) +
           "\" height=\"" + num(row - 2) + "\" fill=\"" + colour(t.task.kind) +
           "\" stroke=\"white\" stroke-width=\"0.5\"><title>" + to_string(t.task) +
           "</title></rect>\n";
      const std::string label = std::to_string(t.task.mb);
      if (w > 7.0 * label.size())
        o += "<text x=\"" + num(x + w / 2) + "\" y=\"" + num(ry + 15) +
             "\" fill=\"white\" text-anchor=\"middle\">" + label + "</text>\n";
    }
    y += row * r.result.pp + gap;
  }
  o += legend(left, width, y, span);
  o += "</svg>\n";
  return o;
}

void write_svg(const std::string& path, const ReportHeader& h, const std::vector<ReportRun>& runs) {
  write_text_file(path, svg_timeline(h, runs), "`svg`");
}

}  // namespace rrfp
