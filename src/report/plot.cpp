// A minimal SVG line plot (loss curves): linear axes, one polyline per series.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/report.hpp"

namespace rrfp {

namespace {

// Whether every x is a whole number (steps): its ticks are then whole too.
bool whole_numbers(const std::vector<PlotSeries>& series) {
  for (const auto& s : series)
    for (const auto& p : s.points)
      if (p.first != std::floor(p.first)) return false;
  return true;
}

// 1, 2 or 5 times a power of ten, giving 2 to 5 intervals over `span`: a tick at a fraction
// of a step was labelled rounded (2.5 as 2, 7.5 as 8 over 10 steps).
double tick_spacing(double span, bool whole) {
  const double raw = span / 5, pow10 = std::pow(10.0, std::floor(std::log10(raw)));
  double d = 10 * pow10;
  for (double m : {1.0, 2.0, 5.0})
    if (m * pow10 >= raw) {
      d = m * pow10;
      break;
    }
  return whole ? std::max(1.0, d) : d;
}

}  // namespace

std::string svg_line_plot(const std::string& title, const std::string& x_label,
                          const std::vector<PlotSeries>& series, double reference,
                          const std::string& reference_label) {
  const double left = 60, top = 40, w = 640, h = 320;
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  if (reference > 0) {
    y0 = std::min(y0, reference);
    y1 = std::max(y1, reference);
  }
  if (!(y0 < y1)) {
    y0 = 0;
    y1 = std::max(1.0, y1);
  }
  y0 = std::floor(y0 * 2) / 2;
  y1 = std::ceil(y1 * 2) / 2;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * w; };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * h; };
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  fmt("%.0f", left + w + 160) + "\" height=\"" + fmt("%.0f", top + h + 50) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + fmt("%.0f", left) + "\" y=\"22\" font-weight=\"bold\">" + title + "</text>\n";
  o += "<rect x=\"" + fmt("%.0f", left) + "\" y=\"" + fmt("%.0f", top) + "\" width=\"" +
       fmt("%.0f", w) + "\" height=\"" + fmt("%.0f", h) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4;
    o += "<text x=\"" + fmt("%.0f", left - 8) + "\" y=\"" + fmt("%.1f", py(y) + 4) +
         "\" text-anchor=\"end\">" + fmt("%.2f", y) + "</text>\n";
  }
  const double dx = tick_spacing(x1 - x0, whole_numbers(series));
  for (int i = 0; x0 + i * dx <= x1 + dx * 1e-9; ++i) {
    const double x = x0 + i * dx;
    o += "<text x=\"" + fmt("%.1f", px(x)) + "\" y=\"" + fmt("%.0f", top + h + 18) +
         "\" text-anchor=\"middle\">" + fmt("%g", x) + "</text>\n";
  }
  o += "<text x=\"" + fmt("%.0f", left + w / 2) + "\" y=\"" + fmt("%.0f", top + h + 38) +
       "\" text-anchor=\"middle\">" + x_label + "</text>\n";
  if (reference > 0) {
    o += "<line x1=\"" + fmt("%.1f", px(x0)) + "\" x2=\"" + fmt("%.1f", px(x1)) + "\" y1=\"" +
         fmt("%.1f", py(reference)) + "\" y2=\"" + fmt("%.1f", py(reference)) +
         "\" stroke=\"#999\" stroke-dasharray=\"5,4\"/>\n";
    o += "<text x=\"" + fmt("%.0f", left + w + 6) + "\" y=\"" + fmt("%.1f", py(reference) + 4) +
         "\" fill=\"#666\">" + reference_label + "</text>\n";
  }
  int k = 0;
  for (const auto& s : series) {
    std::string pts;
    for (const auto& [x, y] : s.points)
      pts += fmt("%.1f", px(x)) + "," + fmt("%.1f", py(y)) + " ";
    o += "<polyline fill=\"none\" stroke=\"" + s.colour + "\" stroke-width=\"1.5\" points=\"" +
         pts + "\"/>\n";
    // A polyline of one point has no length and draws nothing: a single validation (train's
    // --eval-every 0) was named in the legend and not shown.
    if (s.points.size() == 1)
      o += "<circle cx=\"" + fmt("%.1f", px(s.points[0].first)) + "\" cy=\"" +
           fmt("%.1f", py(s.points[0].second)) + "\" r=\"3\" fill=\"" + s.colour + "\"/>\n";
    o += "<text x=\"" + fmt("%.0f", left + w + 6) + "\" y=\"" + fmt("%.0f", top + 14 + 16 * k++) +
         "\" fill=\"" + s.colour + "\">" + s.name + "</text>\n";
  }
  return o + "</svg>\n";
}

}  // namespace rrfp
