package otlp

// UsToS exposes usToS to the external tests.
var UsToS = usToS
