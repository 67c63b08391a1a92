// Mistral's JS SDK for the browser (bundled by `make deps-sdk-js`).
export { Mistral } from '@mistralai/mistralai';
