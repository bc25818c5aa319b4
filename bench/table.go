package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// WriteTable prints results in nccl-tests' layout, one table per
// collective and world size, each ending with its average bus bandwidth.
func WriteTable(w io.Writer, results []Result) {
	for i := 0; i < len(results); {
		j := i
		for j < len(results) && results[j].Op == results[i].Op && results[j].NP == results[i].NP {
			j++
		}
		group := results[i:j]
		fmt.Fprintf(w, "# Collective test: %s, %d ranks\n#\n", group[0].Op, group[0].NP)
		fmt.Fprintf(w, "# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")
		fmt.Fprintf(w, "# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
		var sum float64
		for _, r := range group {
			fmt.Fprintf(w, "  %10d %12d %8s %6s %6d %10.2f %8.2f %8.2f %7d\n", r.Bytes, r.Count, r.Type, r.RedOp, r.Root, r.TimeUS, r.AlgBW, r.BusBW, r.Wrong)
			sum += r.BusBW
		}
		fmt.Fprintf(w, "# Avg bus bandwidth    : %.3f\n#\n", sum/float64(len(group)))
		i = j
	}
}

// WriteCSV writes one row per result with a header.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"op", "np", "bytes", "count", "type", "redop", "root", "time_us", "algbw_gbs", "busbw_gbs", "wrong"})
	for _, r := range results {
		cw.Write([]string{r.Op, strconv.Itoa(r.NP), strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Count), r.Type, r.RedOp,
			strconv.Itoa(r.Root), strconv.FormatFloat(r.TimeUS, 'f', 3, 64), strconv.FormatFloat(r.AlgBW, 'f', 4, 64),
			strconv.FormatFloat(r.BusBW, 'f', 4, 64), strconv.FormatInt(r.Wrong, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the results as a JSON array.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// WriteSummary prints bus bandwidth (GB/s) by message size, one row per
// collective, world size and variant, so ring sizes and algorithms can be
// compared at a glance.
func WriteSummary(w io.Writer, results []Result) {
	var sizes []int64
	seen := map[int64]bool{}
	type key struct {
		op, variant string
		np          int
	}
	var keys []key
	rows := map[key]map[int64]float64{}
	for _, r := range results {
		if !seen[r.Bytes] {
			seen[r.Bytes] = true
			sizes = append(sizes, r.Bytes)
		}
		k := key{r.Op, r.Variant, r.NP}
		if rows[k] == nil {
			rows[k] = map[int64]float64{}
			keys = append(keys, k)
		}
		rows[k][r.Bytes] = r.BusBW
	}
	fmt.Fprintf(w, "# Summary: bus bandwidth (GB/s) by message size\n# %-15s %-8s %3s", "collective", "variant", "np")
	for _, s := range sizes {
		fmt.Fprintf(w, " %8s", humanBytes(s))
	}
	fmt.Fprintln(w)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-15s %-8s %3d", k.op, k.variant, k.np)
		for _, s := range sizes {
			if v, ok := rows[k][s]; ok {
				fmt.Fprintf(w, " %8.3f", v)
			} else {
				fmt.Fprintf(w, " %8s", "-")
			}
		}
		fmt.Fprintln(w)
	}
}

func humanBytes(b int64) string {
	v, unit := binaryUnit(b)
	return fmt.Sprintf("%d%s", v, [...]string{"B", "K", "M", "G"}[unit])
}

// binaryUnit writes b in the largest binary unit that divides it: b =
// v·1024^unit, unit at most 3 (GiB).
func binaryUnit(b int64) (v int64, unit int) {
	for unit < 3 && b >= 1<<10 && b%(1<<10) == 0 {
		b >>= 10
		unit++
	}
	return b, unit
}
