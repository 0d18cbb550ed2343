# shellcheck shell=bash
# Sourced by the benchmark scripts that write the suite's CSV (bench/suite.sh, bench/languages.sh with
# SUITE_CSV, and any script that wants its rows in bench/report.py's table and chart). One row a
# measurement, these columns exactly:
#   scenario,model,server,protocol,concurrency,round,infer_per_sec,p50_us,p99_us,mb_per_sec
# server is nereus, triton or ceiling; mb_per_sec is empty where it means nothing (small tensors).
# bench/report.py groups rows by (scenario, protocol, concurrency) and takes the median of the rounds.

SUITE_COLUMNS=scenario,model,server,protocol,concurrency,round,infer_per_sec,p50_us,p99_us,mb_per_sec

# csv_row CSV SCENARIO MODEL SERVER PROTOCOL CONCURRENCY ROUND PERF_LINE [MB_PER_SEC]
# Appends one row (the header first if CSV is empty or new). PERF_LINE is what ../shared/anchors/perf.sh
# prints ("simple proto=http c=4 throughput=4731.3 p50_us=812 p99_us=1362").
csv_row() {
  local csv=$1 scenario=$2 model=$3 server=$4 proto=$5 c=$6 round=$7 line=$8 mb=${9:-} t p50 p99
  case $server in nereus | triton | ceiling) ;; *) echo "csv_row: server '$server' is not nereus, triton or ceiling" >&2; return 1 ;; esac
  [[ $scenario$model$proto != *,* ]] || { echo "csv_row: no commas in names: $scenario $model $proto" >&2; return 1; }
  t=$(sed -n 's/.*throughput=\([0-9.]*\).*/\1/p' <<<"$line")
  p50=$(sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' <<<"$line")
  p99=$(sed -n 's/.*p99_us=\([0-9.]*\).*/\1/p' <<<"$line")
  [[ -n $t ]] || { echo "csv_row: no throughput in: $line" >&2; return 1; }
  [[ -s $csv ]] || echo "$SUITE_COLUMNS" >"$csv"
  echo "$scenario,$model,$server,$proto,$c,$round,$t,$p50,$p99,$mb" >>"$csv"
}

# The suite's second table, what a server costs rather than how fast it answers (bench/density.sh,
# bench/light_load.sh, bench/quota.sh as the suite's hooks, SUITE_COST_CSV): one row a number, these
# columns exactly (bench/report.py takes the median of the rounds per scenario, measure and server):
COST_COLUMNS=scenario,measure,server,round,value

# cost_row CSV SCENARIO MEASURE SERVER ROUND VALUE
cost_row() {
  local csv=$1 scenario=$2 measure=$3 server=$4 round=$5 value=$6
  case $server in nereus | triton | ceiling) ;; *) echo "cost_row: server '$server' is not nereus, triton or ceiling" >&2; return 1 ;; esac
  [[ $scenario$measure != *,* ]] || { echo "cost_row: no commas in names: $scenario / $measure" >&2; return 1; }
  [[ $value =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || { echo "cost_row: '$value' is not a number ($scenario / $measure)" >&2; return 1; }
  [[ -s $csv ]] || echo "$COST_COLUMNS" >"$csv"
  echo "$scenario,$measure,$server,$round,$value" >>"$csv"
}
