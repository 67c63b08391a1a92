package meter

var formatNames = [...]string{
	FormatUnknown:         "unknown",
	FormatOpenAIChat:      "openai-chat",
	FormatOpenAIResponses: "openai-responses",
	FormatAnthropic:       "anthropic",
	FormatVercelAI:        "vercel-ai",
	FormatOllama:          "ollama",
	FormatSSE:             "sse",
	FormatNDJSON:          "ndjson",
	FormatText:            "text",
}

// String returns the format's short name ("openai-chat", "anthropic", ...).
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "invalid"
}

var statusNames = [...]string{
	StatusOpen:         "open",
	StatusComplete:     "complete",
	StatusAborted:      "aborted",
	StatusNetworkError: "network-error",
	StatusHTTPError:    "http-error",
}

// String returns the status's short name.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "invalid"
}

var causeNames = [...]string{
	CauseNone:    "none",
	CauseUnknown: "unknown",
	CauseNetwork: "network",
	CausePage:    "page",
	CauseOrigin:  "origin",
}

// String returns the cause's short name.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "invalid"
}
