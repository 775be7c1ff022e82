package agent

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// OTLP profiles let a resource's (and a scope's) attributes name their
// keys and string values by index into the request's string table
// (KeyValue.key_strindex, AnyValue.string_value_strindex), and the
// Collector's pdata encoder writes them so. Not every consumer reads them:
// Grafana Pyroscope reads only KeyValue.key and plain string values, so
// every key arrives empty and the request is refused. Keys and values
// written inline are what every version of the format reads, so the agent
// rewrites its requests that way (inlineAttributes). The dictionary's own
// attribute table (samples', mappings', locations') is the profiles
// format's from its start and stays as it is.

// Field numbers of opentelemetry/proto/.../profiles/v1development and
// common/v1, as the encoder the agent uses writes them.
const (
	fieldRequestResourceProfiles = 1 // ExportProfilesServiceRequest.resource_profiles
	fieldRequestDictionary       = 2 // ExportProfilesServiceRequest.dictionary
	fieldDictionaryStringTable   = 5 // ProfilesDictionary.string_table
	fieldResourceProfilesRes     = 1 // ResourceProfiles.resource
	fieldResourceProfilesScopes  = 2 // ResourceProfiles.scope_profiles
	fieldResourceAttributes      = 1 // Resource.attributes
	fieldScopeProfilesScope      = 1 // ScopeProfiles.scope
	fieldScopeAttributes         = 3 // InstrumentationScope.attributes
	fieldKeyValueKey             = 1 // KeyValue.key
	fieldKeyValueValue           = 2 // KeyValue.value
	fieldKeyValueKeyStrindex     = 3 // KeyValue.key_strindex
	fieldAnyValueString          = 1 // AnyValue.string_value
	fieldAnyValueStrindex        = 8 // AnyValue.string_value_strindex
)

var errMalformed = errors.New("malformed protobuf")

// inlineAttributes is the export request b with its resource and scope
// attributes' keys and string values written inline, where they were
// given by index into the dictionary's string table.
func inlineAttributes(b []byte) ([]byte, error) {
	table, err := stringTable(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(b)/8)
	err = eachField(b, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		if num != fieldRequestResourceProfiles || typ != protowire.BytesType {
			out = append(out, field...)
			return nil
		}
		rp, err := rewriteFields(value, map[protowire.Number]rewrite{
			fieldResourceProfilesRes: func(v []byte) ([]byte, error) {
				return rewriteFields(v, map[protowire.Number]rewrite{fieldResourceAttributes: inlineKeyValue(table)})
			},
			fieldResourceProfilesScopes: func(v []byte) ([]byte, error) {
				return rewriteFields(v, map[protowire.Number]rewrite{fieldScopeProfilesScope: func(v []byte) ([]byte, error) {
					return rewriteFields(v, map[protowire.Number]rewrite{fieldScopeAttributes: inlineKeyValue(table)})
				}})
			},
		})
		if err != nil {
			return err
		}
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, rp)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inline attributes: %w", err)
	}
	return out, nil
}

// stringTable is the string table of the request's dictionary.
func stringTable(b []byte) ([]string, error) {
	var table []string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _, value []byte) error {
		if num != fieldRequestDictionary || typ != protowire.BytesType {
			return nil
		}
		return eachField(value, func(num protowire.Number, typ protowire.Type, _, value []byte) error {
			if num == fieldDictionaryStringTable && typ == protowire.BytesType {
				table = append(table, string(value))
			}
			return nil
		})
	})
	return table, err
}

// rewrite is what becomes of a length-delimited field's contents.
type rewrite func(value []byte) ([]byte, error)

// rewriteFields is message b with the length-delimited fields named in
// how rewritten, and every other field as it was.
func rewriteFields(b []byte, how map[protowire.Number]rewrite) ([]byte, error) {
	out := make([]byte, 0, len(b))
	err := eachField(b, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		f, ok := how[num]
		if !ok || typ != protowire.BytesType {
			out = append(out, field...)
			return nil
		}
		v, err := f(value)
		if err != nil {
			return err
		}
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, v)
		return nil
	})
	return out, err
}

// inlineKeyValue rewrites a KeyValue whose key, or whose string value, is
// an index into table: the strings themselves, in key and string_value.
func inlineKeyValue(table []string) rewrite {
	str := func(i uint64) (string, error) {
		if i >= uint64(len(table)) {
			return "", fmt.Errorf("%w: string index %d past a table of %d", errMalformed, i, len(table))
		}
		return table[i], nil
	}
	return func(b []byte) ([]byte, error) {
		var key string
		var hasKey bool
		var rest []byte // the other fields, the value rewritten
		err := eachField(b, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
			switch {
			case num == fieldKeyValueKey && typ == protowire.BytesType:
				key, hasKey = string(value), true
			case num == fieldKeyValueKeyStrindex && typ == protowire.VarintType:
				i, _ := protowire.ConsumeVarint(value)
				s, err := str(i)
				if err != nil {
					return err
				}
				if !hasKey || key == "" {
					key, hasKey = s, true
				}
			case num == fieldKeyValueValue && typ == protowire.BytesType:
				v, err := inlineAnyValue(value, str)
				if err != nil {
					return err
				}
				rest = protowire.AppendTag(rest, num, protowire.BytesType)
				rest = protowire.AppendBytes(rest, v)
			default:
				rest = append(rest, field...)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, len(key)+len(rest)+8)
		if hasKey {
			out = protowire.AppendTag(out, fieldKeyValueKey, protowire.BytesType)
			out = protowire.AppendString(out, key)
		}
		return append(out, rest...), nil
	}
}

// inlineAnyValue is AnyValue b with a string value given by index written
// as the string itself.
func inlineAnyValue(b []byte, str func(uint64) (string, error)) ([]byte, error) {
	out := make([]byte, 0, len(b))
	err := eachField(b, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		if num != fieldAnyValueStrindex || typ != protowire.VarintType {
			out = append(out, field...)
			return nil
		}
		i, _ := protowire.ConsumeVarint(value)
		s, err := str(i)
		if err != nil {
			return err
		}
		out = protowire.AppendTag(out, fieldAnyValueString, protowire.BytesType)
		out = protowire.AppendString(out, s)
		return nil
	})
	return out, err
}

// eachField calls f with each field of message b: its number, its wire
// type, its whole encoding, and its contents (a length-delimited field's
// bytes, a varint's or fixed value's encoding).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(m))
		}
		value := b[n : n+m]
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(value)
			if k < 0 {
				return fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(k))
			}
			value = v
		}
		if err := f(num, typ, b[:n+m], value); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
