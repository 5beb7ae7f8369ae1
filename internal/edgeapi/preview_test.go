package edgeapi

import "testing"

func TestParseInvalidation(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		want          Invalidation
		err           bool
	}{
		{"bare label from an older control", "abcdefghij", Invalidation{Kind: InvalidatePort, Label: "abcdefghij"}, false},
		{"port", Invalidation{Kind: InvalidatePort, Label: "l1"}.Payload(), Invalidation{Kind: InvalidatePort, Label: "l1"}, false},
		{"sandbox", Invalidation{Kind: InvalidateSandbox, SandboxID: "sb"}.Payload(), Invalidation{Kind: InvalidateSandbox, SandboxID: "sb"}, false},
		{"token", Invalidation{Kind: InvalidateToken, AccountID: "a"}.Payload(), Invalidation{Kind: InvalidateToken, AccountID: "a"}, false},
		{"members", Invalidation{Kind: InvalidateMembers}.Payload(), Invalidation{Kind: InvalidateMembers}, false},
		{"broken JSON", `{"kind":`, Invalidation{}, true},
	} {
		got, err := ParseInvalidation(tc.payload)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: ParseInvalidation(%q) = %+v, %v; want %+v, error %v", tc.name, tc.payload, got, err, tc.want, tc.err)
		}
	}
}
