package console

import "testing"

// TestLocalPath: the login's next= stays on this site whatever a link
// puts in it.
func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/topics?x=1":        "/topics?x=1",
		"/messages?topic=a":  "/messages?topic=a",
		"":                   "/",
		"topics":             "/",
		"//evil.example/":    "/",
		"/\\evil.example/":   "/",
		"/\t/evil.example/":  "/",
		"/\n/evil.example/":  "/",
		"https://evil/":      "/",
		"/login?next=/login": "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}
