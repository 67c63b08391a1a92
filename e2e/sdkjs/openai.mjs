// The OpenAI JS SDK for the browser (bundled by `make deps-sdk-js`), and its
// Azure OpenAI client.
export { default, OpenAI, AzureOpenAI } from 'openai';
