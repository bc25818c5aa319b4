package comm

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHosts bounds an expanded host list, so a hostile or mistyped range
// ("n[1-999999999]") is an error rather than an out-of-memory.
const maxHosts = 1 << 16

// ExpandHostlist expands Slurm's compressed host-list syntax the way
// `scontrol show hostnames` does: "gpu[01-04,07],login2" gives gpu01, gpu02,
// gpu03, gpu04, gpu07, login2. Ranges keep their zero padding; several
// bracket groups in one name ("r[1-2]n[1-2]") expand to their product.
func ExpandHostlist(list string) ([]string, error) {
	var hosts []string
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("hostlist %q: nested '[' at offset %d", list, i)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("hostlist %q: ']' without '[' at offset %d", list, i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("hostlist %q: unclosed '['", list)
		}
		item := strings.TrimSpace(list[start:i])
		start = i + 1
		if item == "" {
			continue
		}
		expanded, err := expandOne(item, maxHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", list, err)
		}
		hosts = append(hosts, expanded...)
	}
	return hosts, nil
}

// expandOne expands one comma-free item such as "n[1-3]x[a,b]" (no more than limit names).
func expandOne(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsRune(item, ']') {
			return nil, fmt.Errorf("']' without '[' in %q", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unclosed '[' in %q", item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	if body == "" {
		return nil, fmt.Errorf("empty brackets in %q", item)
	}
	tails, err := expandOne(rest, limit)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, found := strings.Cut(part, "-")
		if !found {
			hi = lo
		}
		if lo == "" || hi == "" {
			return nil, fmt.Errorf("bad range %q in %q", part, item)
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad range %q in %q: not decimal numbers", part, item)
		}
		if a > b {
			return nil, fmt.Errorf("bad range %q in %q: start above end", part, item)
		}
		if int(b-a+1)*len(tails) > limit-len(out) {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		width := len(lo)
		for v := a; v <= b; v++ {
			num := strconv.FormatUint(v, 10)
			if len(num) < width {
				num = strings.Repeat("0", width-len(num)) + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
