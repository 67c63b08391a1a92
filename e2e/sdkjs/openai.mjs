// The OpenAI JS SDK for the browser (bundled by `make deps-sdk-js`).
export { default, OpenAI } from 'openai';
