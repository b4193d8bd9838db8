package policy

import (
	"encoding/json"
	"fmt"
)

// jsonText is v as the API's JSON, for an Issue's value.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
