# Draws courier-perf --matrix's figures: a group of bars per cell (setup and test), Courier's figure
# beside the raw limit of the same transport measured in the same run and libmsgque's from its
# summary, on a log scale. courier-perf --chart runs it as
#   gnuplot -e "datafile='F.dat'; outfile='F.png'; charttitle='...'" perf_chart.gp
if (!exists("datafile")) datafile = "perf.png.dat"
if (!exists("outfile")) outfile = "perf.png"
if (!exists("charttitle")) charttitle = "courier-perf --matrix"

set terminal pngcairo size 1800,720 font "sans,9"
set output outfile
set title charttitle noenhanced
set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set format y "10^{%L}"
set ylabel "counts per second (log scale)"
set grid ytics
set xtics rotate by -50 scale 0 font "sans,8"
# Above the plot, in one row: inside it the key covered the tallest bars.
set key outside top center horizontal
plot datafile using 2:xtic(1) title "Courier" linecolor rgb "#1f77b4", \
     "" using 3 title "raw limit, same run" linecolor rgb "#aaaaaa", \
     "" using 4 title "libmsgque (its 2009 summary: another machine, a scale)" linecolor rgb "#ff7f0e"
