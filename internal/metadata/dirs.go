package metadata

import (
	"encoding/json"
	"slices"
	"strconv"
)

// PartitionDirs is one partition's replicas' directory ids, by broker: a
// short slice, not a map (a map's first group of slots was ~0.25 KiB per
// partition on every node, issue 27). It is never changed in place once
// stored in a Topic: recordDirs builds a new one, so clones share them.
// It encodes as the JSON object the map was ({"1":"dir-id"}), so the
// metadata file and the commands keep their format.
type PartitionDirs []BrokerDir

// BrokerDir is one replica's broker and its directory id.
type BrokerDir struct {
	Broker int32
	Dir    string
}

// Get is broker's directory id ("" if not recorded).
func (d PartitionDirs) Get(broker int32) string {
	for _, e := range d {
		if e.Broker == broker {
			return e.Dir
		}
	}
	return ""
}

// Has reports whether broker's directory is recorded.
func (d PartitionDirs) Has(broker int32) bool {
	for _, e := range d {
		if e.Broker == broker {
			return true
		}
	}
	return false
}

// MarshalJSON writes the object encoding/json wrote for the map: keys
// are the broker ids in the order of their decimal strings; nil is null.
func (d PartitionDirs) MarshalJSON() ([]byte, error) {
	if d == nil {
		return []byte("null"), nil
	}
	keys := make([]string, len(d))
	for i, e := range d {
		keys[i] = strconv.Itoa(int(e.Broker))
	}
	order := make([]int, len(d))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return 0
	})
	b := []byte{'{'}
	for n, i := range order {
		if n > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, keys[i])
		v, err := json.Marshal(d[i].Dir)
		if err != nil {
			return nil, err
		}
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads the object; null leaves d as it is (encoding/json's
// convention).
func (d *PartitionDirs) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var m map[int32]string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	out := make(PartitionDirs, 0, len(m))
	for k, v := range m {
		out = append(out, BrokerDir{Broker: k, Dir: v})
	}
	slices.SortFunc(out, func(a, b BrokerDir) int { return int(a.Broker) - int(b.Broker) })
	*d = out
	return nil
}
