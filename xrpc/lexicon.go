package xrpc

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/atfeeds/appview/lexicons"
)

// lexiconRoute serves the Lexicon documents of the methods, rendered for
// the configured namespace: GET /lexicons/<nsid>.json.
const lexiconRoute = "/lexicons/:file"

// lexiconHandler renders the documents once, for namespace. The documents
// are embedded and tested, so a rendering error is a broken build: it
// panics, like NewServer on an invalid config.
func lexiconHandler(namespace string) echo.HandlerFunc {
	docs, err := lexicons.Render(namespace)
	if err != nil {
		panic("xrpc: render lexicons: " + err.Error())
	}
	return func(c echo.Context) error {
		nsid, ok := strings.CutSuffix(c.Param("file"), ".json")
		doc, found := docs[nsid]
		if !ok || !found {
			return &Error{Status: http.StatusNotFound, Name: "NotFound", Message: "no such lexicon"}
		}
		return c.Blob(http.StatusOK, "application/json; charset=utf-8", doc)
	}
}
