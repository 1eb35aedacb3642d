import Phaser from 'phaser';
import { MainScene } from './scenes/MainScene';

// Phaser.AUTO uses WebGL where there is a GPU (or SwiftShader) and falls
// back to the Canvas renderer, so the game also runs in a headless browser.
const config: Phaser.Types.Core.GameConfig = {
  type: Phaser.AUTO,
  parent: 'game',
  width: 800,
  height: 600,
  backgroundColor: '#1d3557',
  physics: { default: 'arcade', arcade: { gravity: { x: 0, y: 300 } } },
  scene: [MainScene],
};

const game = new Phaser.Game(config);

// Handy for tests and the console: window.game.
declare global {
  interface Window { game: Phaser.Game }
}
window.game = game;
