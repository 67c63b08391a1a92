// Groq's JS SDK for the browser (bundled by `make deps-sdk-js`).
export { default, Groq } from 'groq-sdk';
