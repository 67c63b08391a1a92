// Ollama's browser build (bundled by `make deps-sdk-js`).
export { Ollama, default } from 'ollama/browser';
